"""Spark's set-at-a-time top-k equals the pure reference (exact and cached), under hypothesis."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.core.topk.reference import exact_topk, topk_at_cache
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError
from outoforder.spark.topk import as_lists, cache_topk, emission_seqs, window_topk

pytestmark = [pytest.mark.spark]

W = Windows(size_us=60, slide_us=20)

streams = st.integers(1, 50).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(-100, 400), min_size=n, max_size=n),
        st.lists(st.sampled_from([0.0, 1.0, 2.5, -3.0, 7.0]), min_size=n, max_size=n),  # ties
    )
)


def frame(spark, ts, score):
    rows = [(i, int(t), float(s)) for i, (t, s) in enumerate(zip(ts, score, strict=True))]
    return spark.createDataFrame(rows, "seq long, ts long, score double")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=streams, k=st.integers(1, 4), cache=st.sampled_from([0, 7, 20, 1_000]))
def test_spark_topk_equals_the_reference(spark, data, k, cache):
    ts, score = np.array(data[0], dtype=np.int64), np.array(data[1])
    tid = np.arange(ts.size, dtype=np.int64)
    df = frame(spark, ts, score)
    assert as_lists(window_topk(df, W, k)) == exact_topk(ts, score, tid, W, k)
    want = {w: v for w, v in topk_at_cache(ts, score, tid, W, k, cache).items() if v}
    assert as_lists(cache_topk(df, W, k, cache)) == want


def test_emission_is_the_first_arrival_reaching_end_plus_k(spark):
    # window 0 = [0, 60): progress reaches 60 + 7 at the arrival of ts 70 (seq 2), not ts 66 (seq 1)
    df = frame(spark, [10, 66, 70, 30], [1.0, 2.0, 3.0, 9.0])
    got = {r["window_id"]: r["emit_seq"] for r in emission_seqs(df, W, 7).collect()}
    assert got[0] == 2
    assert got[3] is None  # [60, 120) is never passed: emitted at the end
    # the late tuple (ts 30, seq 3) misses window 0 but is in window 1 = [20, 80), not yet due
    assert as_lists(cache_topk(df, W, 1, 7))[0] == [0]
    assert as_lists(cache_topk(df, W, 1, 7))[1] == [3]


def test_bad_arguments(spark):
    df = frame(spark, [1], [1.0])
    with pytest.raises(ConfigError):
        window_topk(df, W, 0)
    with pytest.raises(ConfigError):
        cache_topk(df, W, 1, -1)
