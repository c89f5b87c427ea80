"""The equi-join pre-filters on Spark: nothing a join needs is dropped; semi-join drops exactly the rest."""

import math
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.errors import ConfigError
from outoforder.spark.mcf import prefilter

pytestmark = [pytest.mark.spark]

values = st.sampled_from([0.0, -0.0, 1.0, 2.5, -3.0, 7.0, 1e300, float("nan"), None])
frames_st = st.lists(st.lists(values, min_size=0, max_size=30), min_size=2, max_size=4)


def norm(v):
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else (0.0 if v == 0 else v)


def join_size(lists):
    """The equi-join's output size: per key present everywhere, the product of its counts."""
    counts = [Counter(k for k in (norm(v) for v in vals) if k is not None) for vals in lists]
    common = set(counts[0]).intersection(*counts[1:])
    return sum(math.prod(c[k] for c in counts) for k in common)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lists=frames_st, bits=st.sampled_from([4, 8, 16]))
def test_prefilters_keep_every_joining_row_and_semi_keeps_only_those(spark, lists, bits):
    frames = [
        spark.createDataFrame([(i, v) for i, v in enumerate(vals)], f"s{n}_seq long, s{n}_v double")
        for n, vals in enumerate(lists)
    ]
    cols = [f"s{n}_v" for n in range(len(frames))]
    keys = [{norm(v) for v in vals} - {None} for vals in lists]
    want = [
        sorted(
            i
            for i, v in enumerate(vals)
            if norm(v) is not None and all(norm(v) in keys[j] for j in range(len(lists)) if j != n)
        )
        for n, vals in enumerate(lists)
    ]
    for method in ("mcf", "semi", "none"):
        out, stats = prefilter(frames, cols, method, fingerprint_bits=bits, min_drop=0.0)  # always applied
        kept = [sorted(r[0] for r in f.collect()) for f in out]
        assert stats.rows_in == [len(v) for v in lists]
        assert stats.rows_kept == [len(k) for k in kept]
        if method == "semi":
            assert kept == want
        elif method == "mcf":  # a superset of what the join needs; false positives only keep rows
            assert all(set(w) <= set(k) for w, k in zip(want, kept, strict=True))
        kept_vals = [[lists[n][i] for i in k] for n, k in enumerate(kept)]
        assert join_size(kept_vals) == join_size(lists)


def test_mcf_drops_most_absent_keys_and_reports_its_filters(spark):
    a = spark.createDataFrame([(i, float(i)) for i in range(2_000)], "s0_seq long, s0_v double")
    b = spark.createDataFrame([(i, float(i * 10)) for i in range(2_000)], "s1_seq long, s1_v double")
    _, stats = prefilter([a, b], ["s0_v", "s1_v"], "mcf")
    assert stats.applied and stats.shards == 2  # built by the executors, one shard per frame here
    assert stats.rows_kept[0] >= 200  # keys 0, 10, …, 1990 join
    assert stats.rows_kept[0] <= 200 + 0.01 * 1_800  # f = 16: ε ≈ 1.2e-4 per absent key
    assert all(abs(d - 2_000) <= 40 for d in stats.distinct_keys) and stats.filter_bytes > 0  # HLL: ±2 %
    assert abs(stats.estimated_kept - 0.1) < 0.02  # 200 of the 2,000 keys of each side are shared
    assert "[prefilter] mcf: estimated to keep" in stats.line()
    with pytest.raises(ConfigError):
        prefilter([a, b], ["s0_v", "s1_v"], "bloom")


def test_a_prefilter_that_would_not_pay_is_skipped_and_says_so(spark):
    a = spark.createDataFrame([(i, float(i % 500)) for i in range(2_000)], "s0_seq long, s0_v double")
    b = spark.createDataFrame([(i, float(i % 450)) for i in range(900)], "s1_seq long, s1_v double")
    out, stats = prefilter([a, b], ["s0_v", "s1_v"], "mcf")  # 90 % of a's keys, all of b's, are shared
    assert not stats.applied and stats.filter_bytes == 0
    assert out[0] is a and out[1] is b
    assert stats.rows_kept == stats.rows_in == [2_000, 900]
    assert 0.85 < stats.estimated_kept < 0.97
    assert "mcf skipped: estimated to keep" in stats.line()
