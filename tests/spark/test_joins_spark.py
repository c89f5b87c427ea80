"""Spark QJoin over micro-batches equals the pure set form (and so the tuple-at-a-time reference)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.core.joins.adaptation import AdaptationSettings
from outoforder.core.joins.aq_kslack import aq_kslack_schedule
from outoforder.core.joins.kslack import FixedK, MaxDelayK, ScheduledK, kslack_set
from outoforder.core.joins.qjoin import qjoin_set
from outoforder.core.joins.query import JoinQuery, exact_join
from outoforder.spark.joins import KSlackState, QJoinState, exact_pairs, kslack_batch, qjoin_batch
from tests.core.joins.strategies import MODELS, make_input

pytestmark = [pytest.mark.spark]


def run_spark(spark, inp, query, d_r, d_s, batch, rows_per_task=2_000_000):
    rows = [
        (
            i,
            int(inp.side[i]),
            int(inp.ts[i]),
            float(inp.x[i]),
            float(inp.y[i]),
            int(inp.key[i]),
            int(d_r[i]),
            int(d_s[i]),
        )
        for i in range(len(inp))
    ]
    cols = ["seq", "side", "ts", "x", "y", "key", "d_r", "d_s"]
    state = QJoinState.empty(spark)
    out = []
    for start in range(0, len(rows), batch):
        df = spark.createDataFrame(rows[start : start + batch], cols)
        pairs, state = qjoin_batch(df, state, query, rows_per_task=rows_per_task)
        out += [(r["r_seq"], r["s_seq"], r["emitted_at"]) for r in pairs.collect()]
    return sorted(out)


def expected(inp, query, d_r, d_s):
    run = qjoin_set(inp, query, d_r, d_s)
    return sorted(
        zip(run.pairs[:, 0].tolist(), run.pairs[:, 1].tolist(), run.emitted_at.tolist(), strict=True)
    )


@pytest.mark.parametrize(
    ("n", "seed", "batch", "rows_per_task"),
    # a batch per arrival costs a Spark job or two per arrival: a shorter stream for it
    [(12, 6, 1, 2_000_000), (80, 5, 7, 2_000_000), (80, 5, 40, 9), (80, 5, 1000, 2_000_000)],
)
def test_micro_batch_size_never_changes_the_result(spark, n, seed, batch, rows_per_task):
    inp = make_input(seed, n, MODELS[2], span_us=n * 3)
    q = JoinQuery(window_us=12, theta=1.5)
    d_r = np.where(np.arange(n) < n // 2, 3, 9).astype(np.int64)  # an adaptation mid-stream
    d_s = np.full(n, 5, dtype=np.int64)
    assert len(expected(inp, q, d_r, d_s)) > 5  # the case is not vacuous
    # rows_per_task 9: each batch's scan split into ranges of arrivals with carried state
    assert run_spark(spark, inp, q, d_r, d_s, batch, rows_per_task) == expected(inp, q, d_r, d_s)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 1000),
    model=st.sampled_from(MODELS),
    batch=st.sampled_from([13, 50, 500]),
    predicate=st.sampled_from(["distance", "key"]),
    w=st.integers(0, 20),
    d=st.integers(0, 30),
)
def test_spark_equals_the_set_form_over_seeds_and_delay_models(spark, seed, model, batch, predicate, w, d):
    inp = make_input(seed, 120, model)
    q = JoinQuery(window_us=w, theta=1.5, predicate=predicate)
    d_r = np.full(120, d, dtype=np.int64)
    d_s = np.full(120, d // 2, dtype=np.int64)
    assert run_spark(spark, inp, q, d_r, d_s, batch) == expected(inp, q, d_r, d_s)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 1000),
    model=st.sampled_from(MODELS),
    predicate=st.sampled_from(["distance", "key"]),
    w=st.integers(0, 20),
    theta=st.sampled_from([0.0, 0.7, 1.5, 4.0]),
)
def test_spark_exact_join_equals_the_numpy_ground_truth(spark, seed, model, predicate, w, theta):
    inp = make_input(seed, 150, model)
    q = JoinQuery(window_us=w, theta=theta, predicate=predicate)
    rows = [
        (i * 3, int(inp.side[i]), int(inp.ts[i]), float(inp.x[i]), float(inp.y[i]), int(inp.key[i]))
        for i in range(len(inp))
    ]  # seq = 3 i: arrival numbers need not be dense
    df = spark.createDataFrame(rows, ["seq", "side", "ts", "x", "y", "key"])
    got = sorted((r["r_seq"], r["s_seq"], r["r_ts"], r["s_ts"]) for r in exact_pairs(df, q).collect())
    want = sorted((3 * r, 3 * s, int(inp.ts[r]), int(inp.ts[s])) for r, s in exact_join(inp, q).tolist())
    assert got == want


def run_spark_kslack(spark, inp, query, policy, batch, rows_per_task=2_000_000):
    rows = [
        (i, int(inp.side[i]), int(inp.ts[i]), float(inp.x[i]), float(inp.y[i]), int(inp.key[i]))
        for i in range(len(inp))
    ]
    cols = ["seq", "side", "ts", "x", "y", "key"]
    if isinstance(policy, ScheduledK):  # AQ-K-slack: K per arrival as columns
        rows = [(*r, int(policy.k_r[i]), int(policy.k_s[i])) for i, r in enumerate(rows)]
        cols += ["k_r", "k_s"]
    adaptive = isinstance(policy, MaxDelayK)
    state = KSlackState.empty(spark, (policy.k_r, policy.k_s) if isinstance(policy, FixedK) else (0, 0))
    pairs, late = [], []
    starts = list(range(0, len(rows), batch))
    for n_batch, start in enumerate(starts):
        df = spark.createDataFrame(rows[start : start + batch], cols)
        out, lt, state = kslack_batch(
            df, state, query, adaptive, final=n_batch == len(starts) - 1, rows_per_task=rows_per_task
        )
        pairs += [(r["r_seq"], r["s_seq"], r["emitted_at"]) for r in out.collect()]
        late += [r["seq"] for r in lt.collect()]
    return sorted(pairs), sorted(late)


@pytest.mark.parametrize(
    ("policy", "batch", "rows_per_task"),
    [
        (MaxDelayK(), 1, 2_000_000),
        (MaxDelayK(), 500, 11),
        (FixedK(6, 10), 25, 2_000_000),
        (FixedK(6, 10), 500, 2_000_000),
    ],
)
def test_spark_kslack_equals_the_set_form(spark, policy, batch, rows_per_task):
    n = 12 if batch == 1 else 90  # a batch per arrival: a Spark job or two per arrival
    inp = make_input(9, n, MODELS[0], span_us=n * 3)
    q = JoinQuery(window_us=10, theta=1.5)
    ref = kslack_set(inp, q, policy)
    want = sorted(
        zip(ref.pairs[:, 0].tolist(), ref.pairs[:, 1].tolist(), ref.emitted_at.tolist(), strict=True)
    )
    assert want
    assert ref.late.any()
    got = run_spark_kslack(spark, inp, q, policy, batch, rows_per_task)  # 11: scans split into ranges
    assert got == (want, np.flatnonzero(ref.late).tolist())


@pytest.mark.parametrize("batch", [13, 60, 500])
def test_spark_aq_kslack_follows_the_adapted_schedule_exactly(spark, batch):
    inp = make_input(11, 150, MODELS[1], span_us=450)
    q = JoinQuery(window_us=10, theta=1.5)
    st_ = AdaptationSettings(q_user=0.9, period_us=150, interval_us=30, granularity_us=2, basic_window_us=2)
    sched = aq_kslack_schedule(inp, q, st_)
    assert len(set(sched.k_r.tolist()) | set(sched.k_s.tolist())) > 1  # K really changes mid-stream
    ref = kslack_set(inp, q, sched)
    want = sorted(
        zip(ref.pairs[:, 0].tolist(), ref.pairs[:, 1].tolist(), ref.emitted_at.tolist(), strict=True)
    )
    assert want
    assert run_spark_kslack(spark, inp, q, sched, batch) == (want, np.flatnonzero(ref.late).tolist())
