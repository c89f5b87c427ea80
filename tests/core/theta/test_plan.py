"""FastThetaJoin's plan returns exactly the brute-force result, and its counters add up."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.theta.plan import (
    HASH,
    SLOTS,
    Theta,
    brute_force,
    fast_theta_join,
    skew_split,
    units_from_slots,
)
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
    window=st.sampled_from([None, 1, 7, 100]),
)
def test_equals_brute_force_with_duplicates_nulls_empties_and_extremes(r, s, op, partitions, window):
    theta = Theta.parse(op)
    ra, sa = np.array(r, dtype=np.float64), np.array(s, dtype=np.float64)
    run = fast_theta_join(ra, sa, theta, partitions, window)
    assert run.pairs.tolist() == brute_force(ra, sa, theta).tolist()
    st_ = run.stats
    assert st_.null_rows == int(np.isnan(ra).sum() + np.isnan(sa).sum())
    assert st_.output_rows == len(run.pairs)
    assert st_.rows_compared <= (len(r) - st_.r_filtered) * (len(s) - st_.s_filtered) or not r or not s


def test_heavy_skew_is_split_and_uniform_data_compares_few_rows():
    rng = np.random.default_rng(1)
    skewed = np.concatenate([np.full(900, 5.0), rng.uniform(0, 100, 100)])
    run = fast_theta_join(skewed, rng.uniform(0, 100, 1_000), Theta(">"), partitions=10, window_size=1_000)
    assert max(run.stats.sub_partitions) >= 9  # 900 equal values > MaxSize 100: split
    uni_r, uni_s = rng.uniform(0, 1, 2_000), rng.uniform(0, 1, 2_000)
    uni = fast_theta_join(uni_r, uni_s, Theta("<"), partitions=32)
    assert uni.pairs.tolist() == brute_force(uni_r, uni_s, Theta("<")).tolist()
    # only the diagonal partition pairs need a per-row test: comparisons << output
    assert uni.stats.rows_compared < 0.1 * uni.stats.output_rows
    assert uni.stats.full_pairs > 0


def test_skew_split_matches_the_seed_example_and_bad_input_fails():
    assert skew_split(700, window_size=300 * 4, partitions=4) == [233, 233, 234]
    assert skew_split(10, window_size=1000, partitions=4) == [10]
    for bad in ("<>", "band:x", "band:-1"):
        with pytest.raises(ConfigError):
            Theta.parse(bad)
    with pytest.raises(ConfigError):
        fast_theta_join(np.array([1.0]), np.array([2.0]), Theta("<"), partitions=0)


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 50), min_size=SLOTS, max_size=SLOTS),
    window=st.integers(1, 5_000),
    partitions=st.integers(1, 16),
)
def test_units_cover_every_slot_once_in_value_order_and_near_equal(counts, window, partitions):
    rows = [(3, s, c, float(s // HASH), float(s // HASH) + 0.5) for s, c in enumerate(counts) if c]
    if not rows:
        return
    units = units_from_slots(rows, window, partitions)
    total = sum(counts)
    flag = len(skew_split(total, window, partitions))
    assert sum(u.count for u in units) == total
    assert 1 <= len(units) <= min(flag, len(rows))
    if len(units) > 1:
        slots = [s for u in units for s in u.slots]
        assert slots == sorted(r[1] for r in rows)  # each slot once, consecutive runs by value
        assert all(a.hi <= b.lo + 0.5 for a, b in itertools.pairwise(units))  # ordered by value
        assert max(u.count for u in units) <= total / len(units) + 50  # within one slot of equal
