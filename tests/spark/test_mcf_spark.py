"""The equi-join pre-filters on Spark: nothing a join needs is dropped; semi-join drops exactly the rest."""

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.errors import ConfigError
from outoforder.spark.estimates import parallelism
from outoforder.spark.mcf import SAMPLE_KEYS, estimate_kept, prefilter

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
        # always applied; the rows are counted below, from what is collected
        out, stats = prefilter(frames, cols, method, fingerprint_bits=bits, count_rows=False, min_drop=0.0)
        kept = [sorted(r[0] for r in f.collect()) for f in out]
        assert stats.applied == (method != "none")
        if method == "semi":
            assert kept == want
        elif method == "mcf":  # a superset of what the join needs; false positives only keep rows
            assert all(set(w) <= set(k) for w, k in zip(want, kept, strict=True))
        kept_vals = [[lists[n][i] for i in k] for n, k in enumerate(kept)]
        assert join_size(kept_vals) == join_size(lists)


PAYLOAD = 14  # text columns: Spark puts such a row at 8 + 16 + 14 × 20 = 304 bytes


def wide(spark, n, rows):
    """A frame whose rows are wide enough for the cost check to consider a pre-filter."""
    text = ", ".join(f"p{j} string" for j in range(PAYLOAD))
    return spark.createDataFrame(
        [(i, v, *["x"] * PAYLOAD) for i, v in rows], f"s{n}_seq long, s{n}_v double, {text}"
    )


def test_mcf_drops_most_absent_keys_and_reports_its_filters(spark):
    a = wide(spark, 0, [(i, float(i)) for i in range(2_000)])
    b = wide(spark, 1, [(i, float(i * 10)) for i in range(2_000)])
    _, stats = prefilter([a, b], ["s0_v", "s1_v"], "mcf")
    # built by the executors: Spark cannot size these frames, so a shard per core each
    assert stats.applied and stats.shards == 2 * parallelism(spark)
    assert stats.rows_kept[0] >= 200  # keys 0, 10, …, 1990 join
    assert stats.rows_kept[0] <= 200 + 0.01 * 1_800  # f = 16: ε ≈ 1.2e-4 per absent key
    assert stats.distinct_keys == [2_000, 2_000] and stats.filter_bytes > 0  # counted by the build
    assert stats.estimated_kept == pytest.approx(0.1)  # 200 of each side's 2,000 keys: samples complete
    assert stats.row_bytes == 8 + 16 + 20 * PAYLOAD
    assert "[prefilter] mcf: estimated to keep 10.0%" in stats.line()
    with pytest.raises(ConfigError):
        prefilter([a, b], ["s0_v", "s1_v"], "bloom")


def test_a_prefilter_that_would_not_pay_is_skipped_and_says_so(spark):
    rows_a = [(i, float(i % 500)) for i in range(2_000)]
    rows_b = [(i, float(i % 450)) for i in range(900)]
    a, b = wide(spark, 0, rows_a), wide(spark, 1, rows_b)
    out, stats = prefilter([a, b], ["s0_v", "s1_v"], "mcf")  # 90 % of a's keys, all of b's, are shared
    assert not stats.applied and out[0] is a and out[1] is b
    assert stats.rows_kept == stats.rows_in == [2_000, 900]
    assert stats.estimated_kept == pytest.approx((450 * 4 + 900) / 2_900)  # key multiplicities counted
    assert "mcf skipped: estimated to keep 93.1%" in stats.line()
    # rows of 24 bytes: whatever is dropped cannot save MIN_BYTES_SAVED_PER_ROW a row: no pass is made
    narrow = [
        spark.createDataFrame(r, f"s{n}_seq long, s{n}_v double") for n, r in enumerate([rows_a, rows_b])
    ]
    out, stats = prefilter(narrow, ["s0_v", "s1_v"], "semi")
    assert not stats.applied and out == narrow and stats.estimated_kept is None and stats.filter_bytes == 0
    assert "semi skipped before its pass: rows of about 24 bytes" in stats.line()


def test_the_cost_check_estimates_from_bottom_k_samples():
    rng = np.random.default_rng(3)
    keys = [rng.choice(1 << 40, 50_000, replace=False) for _ in range(2)]
    keys[1][:10_000] = keys[0][:10_000]  # 20 % of each frame's keys shared
    counts = [rng.integers(1, 5, k.size) for k in keys]
    counts[0][:10_000] = 10  # and the shared keys of frame 0 carry more rows
    samples = []
    for k, c in zip(keys, counts, strict=True):
        order = np.argsort(k)[:SAMPLE_KEYS]
        samples.append((k[order], c[order]))
    rows = [int(c.sum()) for c in counts]
    truth = (100_000 + int(counts[1][:10_000].sum())) / sum(rows)
    assert estimate_kept(rows, samples) == pytest.approx(truth, rel=0.1)
    assert estimate_kept(rows, [samples[0], (np.zeros(0), np.zeros(0))]) == 0.0  # a frame without keys
