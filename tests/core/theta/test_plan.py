"""FastThetaJoin's plan returns exactly the brute-force result, and its counters add up."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.theta.fast import fast_theta_join
from outoforder.core.theta.plan import Cuts, Theta, ValueSummary, brute_force, choose_cuts
from outoforder.errors import ConfigError

PREDICATES = ["<", "<=", ">=", ">", "=", "band:0", "band:2.5"]
values = st.one_of(
    st.integers(-20, 20).map(float),  # many duplicates
    st.floats(-1e6, 1e6, allow_nan=False),
    st.just(float("nan")),
    st.sampled_from([1e308, -1e308, float("inf"), float("-inf")]),
)


@settings(max_examples=300, deadline=None)
@given(
    r=st.lists(values, max_size=40),
    s=st.lists(values, max_size=40),
    op=st.sampled_from(PREDICATES),
    partitions=st.integers(1, 9),
)
def test_equals_brute_force_with_duplicates_nulls_empties_and_extremes(r, s, op, partitions):
    theta = Theta.parse(op)
    ra, sa = np.array(r, dtype=np.float64), np.array(s, dtype=np.float64)
    run = fast_theta_join(ra, sa, theta, partitions)
    assert run.pairs.tolist() == brute_force(ra, sa, theta).tolist()
    st_ = run.stats
    assert st_.null_rows == int(np.isnan(ra).sum() + np.isnan(sa).sum())
    assert st_.output_rows == len(run.pairs)
    valid_r, valid_s = int((~np.isnan(ra)).sum()), int((~np.isnan(sa)).sum())
    assert st_.rows_compared <= valid_r * valid_s


def test_skewed_values_get_quantile_cuts_and_heavy_values_are_spread():
    rng = np.random.default_rng(1)
    skewed = np.concatenate([np.full(900, 5.0), rng.uniform(0, 100, 100)])
    other = rng.uniform(0, 100, 1_000)
    run = fast_theta_join(skewed, other, Theta(">"), partitions=10)
    assert run.stats.partitioning == "quantile"
    assert run.pairs.tolist() == brute_force(skewed, other, Theta(">")).tolist()
    sample = np.quantile(np.concatenate([skewed, other]), np.linspace(0, 1, 41)[1:-1], method="inverted_cdf")
    cuts = choose_cuts(sample, 0.0, 100.0, 10)
    ((value, first, k),) = cuts.heavy()
    assert value == 5.0 and k >= 3  # 45 % of the rows: spread over about 4.5 partitions' worth
    spread = cuts.assign(np.full(1_000, 5.0), np.arange(1_000))
    assert set(spread.tolist()) == set(range(first, first + k))


def test_uniform_data_keeps_equal_widths_and_tests_about_the_output():
    rng = np.random.default_rng(2)
    r, s = rng.uniform(0, 1, 3_000), rng.uniform(0, 1, 3_000)
    band = fast_theta_join(r, s, Theta("band", 2 / 3_000), partitions=16)
    assert band.stats.partitioning == "range"
    assert band.pairs.tolist() == brute_force(r, s, Theta("band", 2 / 3_000)).tolist()
    assert band.stats.rows_compared <= 1.01 * band.stats.output_rows  # the issue's ≤ 2
    lt = fast_theta_join(r, s, Theta("<"), partitions=32)
    assert lt.stats.full_pairs > 0
    assert lt.stats.rows_compared < 0.1 * lt.stats.output_rows  # full pairs need no test


def test_cuts_cover_the_line_and_bad_input_fails():
    cuts = Cuts((1.0, 2.0, 2.0, 2.0, 3.0), "quantile")
    v = np.array([-5.0, 1.0, 1.5, 2.0, 2.0, 2.0, 2.5, 3.0, 9.0])
    parts = cuts.assign(v, np.arange(v.size))
    for x, p in zip(v.tolist(), parts.tolist(), strict=True):
        lo, hi = cuts.ranges(-5.0, 9.0)[p]
        assert lo <= x <= hi
    assert choose_cuts(np.array([]), 0.0, 0.0, 8) == Cuts((), "single")
    for bad in ("<>", "band:x", "band:-1"):
        with pytest.raises(ConfigError):
            Theta.parse(bad)
    with pytest.raises(ConfigError):
        fast_theta_join(np.array([1.0]), np.array([2.0]), Theta("<"), partitions=0)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(st.lists(values, max_size=30), min_size=1, max_size=6),
    points=st.integers(0, 12),
)
def test_merged_summaries_count_every_row_and_keep_exact_ends(parts, points):
    """Summaries merged in any grouping: exact rows, nulls, min and max; quantiles sorted, within them."""
    arrays = [np.array(p, dtype=np.float64) for p in parts]
    every = np.concatenate(arrays)
    valid = every[~np.isnan(every)]
    halves = [ValueSummary.merge([ValueSummary.of(a, points) for a in arrays[:1]], points),
              ValueSummary.merge([ValueSummary.of(a, points) for a in arrays[1:]], points)]  # fmt: skip
    got = ValueSummary.merge(halves, points)
    assert (got.n, got.nulls) == (valid.size, every.size - valid.size)
    if valid.size:
        assert (got.lo, got.hi) == (valid.min(), valid.max())
        assert got.sample.size == min(points, valid.size)
        assert np.all(got.sample[:-1] <= got.sample[1:])
        assert np.all((got.sample >= got.lo) & (got.sample <= got.hi))
    else:
        assert got.sample.size == 0
