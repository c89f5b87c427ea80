"""Window assignment and exact aggregates against the literal definitions (property-based)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.control.pd import PDController, PDState
from outoforder.core.windows.aggregate import parse_aggregate, reference_aggregate, window_aggregates
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.routing import BUFFER, LATE, OPERATOR, route
from outoforder.errors import ConfigError

AGGREGATES = ["sum", "count", "avg", "min", "max", "median", "quantile:0.9", "quantile:0.1", "quantile:1"]


def brute_windows(ts, w):
    """Every (tuple, window) membership by testing start <= ts < end over a range of ids."""
    out = []
    for i, t in enumerate(ts):
        for wid in range(t // w.slide_us - w.size_us // w.slide_us - 2, t // w.slide_us + 2):
            start, end = w.bounds(wid)
            if start <= t < end:
                out.append((i, wid))
    return out


@settings(max_examples=60, deadline=None)
@given(
    ts=st.lists(st.integers(-5_000, 5_000), min_size=0, max_size=40),
    slide=st.integers(1, 50),
    mult=st.integers(1, 5),
    extra=st.integers(0, 30),
)
def test_explode_is_exactly_the_half_open_membership(ts, slide, mult, extra):
    w = Windows(size_us=slide * mult + min(extra, slide - 1), slide_us=slide)
    idx, wid = w.explode(np.array(ts, dtype=np.int64))
    assert list(zip(idx.tolist(), wid.tolist(), strict=True)) == brute_windows(ts, w)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 3_000), st.integers(-100, 100)), min_size=1, max_size=60),
    agg=st.sampled_from(AGGREGATES),
    slide=st.sampled_from([100, 250, 500]),
)
def test_vectorised_aggregates_equal_the_reference_per_window(rows, agg, slide):
    w = Windows(size_us=500, slide_us=slide)
    ts = np.array([r[0] for r in rows], dtype=np.int64)
    vals = np.array([r[1] / 4 for r in rows], dtype=np.float64)
    ids, got = window_aggregates(ts, vals, w, agg)
    members: dict[int, list[float]] = {}
    for i, wid in brute_windows(ts.tolist(), w):
        members.setdefault(wid, []).append(float(vals[i]))
    assert ids.tolist() == sorted(members)
    for wid, value in zip(ids.tolist(), got.tolist(), strict=True):
        assert value == pytest.approx(reference_aggregate(members[wid], agg), rel=1e-12, abs=1e-9)


def test_reference_semantics_of_quantiles_and_empty_windows():
    assert reference_aggregate([3.0, 1.0, 2.0, 4.0], "median") == 2.0  # lower median: a value of the window
    assert reference_aggregate([3.0, 1.0, 2.0, 4.0], "quantile:0.75") == 3.0
    assert reference_aggregate([], "count") == 0.0
    assert math.isnan(reference_aggregate([], "sum"))


def test_bad_windows_and_aggregates_fail_clearly():
    for size, slide in ((0, 1), (100, 0), (100, 200)):
        with pytest.raises(ConfigError):
            Windows(size, slide)
    for name in ("mode", "quantile:x", "quantile:0", "quantile:1.5"):
        with pytest.raises(ConfigError):
            parse_aggregate(name)


def test_pd_controller_raises_alpha_on_shortfall_lowers_it_on_surplus_and_stays_in_range():
    pd = PDController(lambda_thr=0.9, k_p=0.2, k_d=4.0, alpha_initial=0.5)
    s = pd.update(pd.initial(), coverage=0.7)
    assert s.alpha == pytest.approx(0.5 + 0.2 * 0.2)  # no D term on the first window
    s2 = pd.update(s, coverage=0.7)  # the same error again: P term only
    assert s2.alpha == pytest.approx(s.alpha + 0.2 * 0.2)
    low = pd.update(s2, coverage=1.0)  # surplus and a falling error: α drops, clipped at 0
    assert low.alpha == 0.0
    high = pd.update(pd.update(pd.initial(), coverage=1.0), coverage=0.0)  # sudden collapse
    assert high.alpha == 1.0
    assert pd.buffer_us(PDState(0.25), 4_000_000) == 1_000_000
    with pytest.raises(ConfigError):
        PDController(lambda_thr=1.5)


@given(
    ts=st.integers(-1_000, 1_000),
    t_max=st.integers(-500, 500),
    k=st.integers(0, 300),
    size=st.integers(1, 300),
)
def test_routing_classes_partition_the_time_axis_at_the_paper_bounds(ts, t_max, k, size):
    got = int(route([ts], t_max, k, size)[0])
    if t_max - k < ts:
        assert got == BUFFER
    elif t_max - k - size <= ts:
        assert got == OPERATOR
    else:
        assert got == LATE
