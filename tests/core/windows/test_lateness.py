"""What each window needed (core/windows/lateness.py) and the lateness policy built on it (LatenessSlack)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.joins.progress import NEG, previous, running_max
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.hpm import buffered_reference
from outoforder.core.windows.lateness import EDGES, bucket_of, coverage_at, needed_slacks, profiles
from outoforder.core.windows.quality import relative_error
from outoforder.core.windows.slack import LatenessSlack
from outoforder.errors import ConfigError
from outoforder.sources.disorder import inject, parse_model

MS = 1_000


def ms_stream(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n tuples over 2 s of event time, delays of a few to hundreds of ms, values in [0, 10)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 2_000 * MS, n)).astype(np.int64)
    vals = np.round(rng.uniform(0, 10, n), 2)
    order = inject(ts, parse_model("pareto:xm=0.005,alpha=1.3,late_prob=0.6"), seed).order
    return ts[order], vals[order]


def exact_need(lateness: np.ndarray, values: np.ndarray, agg: str, eps: float) -> float:
    """The smallest real K from which on the result over members with ℓ < K is within ε (brute force)."""
    total = {"sum": values.sum(), "count": float(values.size)}[agg]
    for k in sorted({0, *(int(x) + 1 for x in lateness if x >= 0)}):
        inside = lateness < k
        got = {"sum": values[inside].sum(), "count": float(inside.sum())}[agg]
        if inside.any() and relative_error(np.array([got]), np.array([total]))[0] < eps * (1 - 1e-9):
            return float(k)
    raise AssertionError("the whole window is always within ε")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 200), agg=st.sampled_from(["sum", "count"]))
def test_each_observed_window_needs_the_first_grid_edge_at_or_above_its_exact_need(seed, n, agg):
    ts, vals = ms_stream(seed, n)
    w = Windows(200 * MS, 50 * MS)
    q = WindowQuery(w, agg, 0.1, 0.1, coverage_horizon_us=300 * MS)
    run = buffered_reference(ts, vals, q, LatenessSlack(delta=0.1, windows=5, initial_us=20 * MS))
    before = previous(running_max(ts))
    for wid, at, need in zip(run.obs_window, run.obs_at, run.obs_needed_us, strict=True):
        # the members counted when the window was observed: those that arrived up to then
        mine = [i for i in range(at + 1) if wid in w.ids_of(int(ts[i])).tolist()]
        late = np.array([before[i] - w.end_of(wid) if before[i] != NEG else -1 for i in mine])
        exact = exact_need(late, vals[mine], agg, q.eps)
        assert need == EDGES[np.searchsorted(EDGES, exact, side="left")], (wid, exact, need)


def test_a_window_whose_heavy_member_comes_late_needs_that_members_lateness():
    lateness = np.array([-5_000, -1, 2_000, 40_000])
    p = profiles(np.zeros(4, np.int64), bucket_of(lateness), np.array([1.0, 1.0, 1.0, 17.0]), 1)
    need = int(needed_slacks(p, "sum", 0.05, np.array([0.95]))[0])
    assert 40_000 < need <= 40_000 * 1.1  # the 17 is 85 % of the sum
    assert coverage_at(p, need)[0] == 1.0
    assert needed_slacks(p, "max", 0.05, np.array([0.95]))[0] == need  # the max arrives last
    assert needed_slacks(p, "min", 0.05, np.array([0.95]))[0] == 0  # the min is there at once


def test_a_sum_that_leaves_eps_and_comes_back_needs_the_k_after_its_last_miss():
    # +10 at once, −10 at 1 ms, +10 at 5 ms: exact sum 10; within ε at K = 0, not at 1.2 ms, again at 5.4 ms
    lateness, values = np.array([-1, 1_000, 5_000]), np.array([10.0, -10.0, 10.0])
    p = profiles(np.zeros(3, np.int64), bucket_of(lateness), values, 1)
    assert 5_000 < needed_slacks(p, "sum", 0.05, np.array([0.9]))[0] <= 5_500


def test_the_policy_follows_a_burst_and_comes_back_down_once_it_left_the_memory():
    p = LatenessSlack(delta=0.05, windows=20, headroom=0.5, initial_us=1_000 * MS)
    for _ in range(20):
        p.observe_window(1.0, 0.95, 0)
    assert p.slack(0) == 0
    p.observe_unsettled([0, 0, 150 * MS])  # a closed window already misses ε by 150 ms
    assert p.slack(0) == 150 * MS
    for _ in range(20):
        p.observe_window(0.7, 0.95, 200 * MS)
    p.observe_unsettled([])
    assert p.slack(0) == 200 * MS
    for _ in range(19):
        p.observe_window(1.0, 0.95, 0)
    assert p.slack(0) == 200 * MS  # one burst window left: still within the 2.5 % it must serve
    p.observe_window(1.0, 0.95, 0)
    assert p.slack(0) == 0


def test_a_bound_caps_k_and_the_policy_says_what_the_target_would_need():
    p = LatenessSlack(delta=0.1, windows=10, headroom=0.0, bound_us=50 * MS)
    for need in [0] * 8 + [80 * MS, 90 * MS]:
        p.observe_window(1.0, 0.95, need)
    assert (p.slack(0), p.needed_us, p.reachable, p.feasible) == (50 * MS, 80 * MS, 0.8, False)
    for _ in range(9):  # the 80 ms window leaves the memory: 9 of 10 under the bound, 1 − δ
        p.observe_window(1.0, 0.95, 0)
    assert (p.slack(0), p.needed_us, p.reachable, p.feasible) == (0, 0, 0.9, True)


def test_the_operator_raises_k_within_the_burst_and_lowers_it_after():
    # 30 s of a 1 kHz stream; from 10 s to 20 s every other tuple is delayed by 300 ms
    n = 30_000
    ts = np.arange(n, dtype=np.int64) * MS
    delay = np.where((ts >= 10_000 * MS) & (ts < 20_000 * MS) & (np.arange(n) % 2 == 0), 300 * MS, 0)
    order = np.argsort(ts + delay, kind="stable")
    q = WindowQuery(Windows(500 * MS, 100 * MS), "sum", 0.05, 0.05, coverage_horizon_us=1_000 * MS)
    run = buffered_reference(ts[order], np.ones(n)[order], q, LatenessSlack(windows=50, initial_us=0))
    k = run.slack
    arrival_ts = (ts + delay)[order]
    assert k[arrival_ts < 10_000 * MS].max() == 0  # calm: no wait at all
    # a window misses ε unless K covers the delayed tuples of its last 250 ms (half of them late by
    # 300 ms − their distance to the end: 5 % of the sum): within a second of the burst K is there
    burst = k[(arrival_ts >= 11_000 * MS) & (arrival_ts < 20_000 * MS)]
    assert (burst >= 250 * MS).all()
    assert (burst <= 250 * MS * 1.1).all()
    assert k[-1] == 0  # and back to nothing once the burst's windows left the memory


def test_bad_settings_fail_clearly():
    with pytest.raises(ConfigError, match="δ"):
        LatenessSlack(delta=0.0)
    with pytest.raises(ConfigError, match="bound"):
        LatenessSlack(bound_us=-1)
