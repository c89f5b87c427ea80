"""Spark's buffered window operator over micro-batches equals the tuple-at-a-time reference."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.core.control.pd import PDController
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.hpm import buffered_reference
from outoforder.core.windows.slack import FixedSlack, HPMSlack, LatenessSlack, MaxDelaySlack
from outoforder.spark.buffered import WindowState, apply_observations, buffered_batch, foreseen
from tests.core.windows.test_buffered import MODELS, make_stream
from tests.core.windows.test_lateness import ms_stream

pytestmark = [pytest.mark.spark]


def run_spark(spark, ts, vals, query, mode, batch, final=True, rows_per_task=2_000_000):
    """Drive buffered_batch over batches; HPM's α is updated between batches, as in the stage."""
    policy = make_policy(mode) if mode in ("hpm", "lateness", "lateness-short") else None
    foreseen_changed = 0
    rows = [(i, int(ts[i]), float(vals[i])) for i in range(len(ts))]
    state = WindowState.empty(spark)
    emitted, late, slack, obs = [], [], [], []
    starts = list(range(0, len(rows), batch)) or [0]
    for b, start in enumerate(starts):
        df = spark.createDataFrame(rows[start : start + batch], "seq long, ts long, v double")
        if isinstance(policy, LatenessSlack) and (needs := foreseen(df, state, query)) is not None:
            before = policy.slack(0)
            policy.observe_unsettled(needs)  # as the stage: K reads the batch's late members first
            foreseen_changed += policy.slack(0) != before
        k = (
            policy.state.alpha
            if isinstance(policy, HPMSlack)
            else policy.slack(0)
            if policy is not None
            else ("max-delay" if mode == "mp" else 20)
        )
        out, state = buffered_batch(
            df, state, query, k, final=final and b == len(starts) - 1, rows_per_task=rows_per_task
        )
        if policy is not None:
            apply_observations(policy, out)
        emitted.append(out.emitted)
        late += [tuple(r) for r in out.late.select("seq", "wid").collect()]
        slack += [tuple(r) for r in out.slack.collect()]
        obs.append(out.observations)
    return (
        pd.concat(emitted, ignore_index=True),
        sorted(late),
        [s for _, s in sorted(slack)],
        pd.concat(obs, ignore_index=True),
        foreseen_changed,
    )


def make_policy(mode):
    return {
        "hpm": lambda: HPMSlack(PDController(lambda_thr=0.9, alpha_initial=0.3)),
        "mp": MaxDelaySlack,
        "fixed": lambda: FixedSlack(20),
        "lateness": lambda: LatenessSlack(delta=0.1, windows=5, initial_us=20_000),
        "lateness-short": lambda: LatenessSlack(delta=0.1, windows=5, initial_us=20),
    }[mode]()


def reference(ts, vals, query, mode, batch, final=True):
    return buffered_reference(
        ts, vals, query, make_policy(mode), control_points=list(range(batch, len(ts) + 1, batch)), flush=final
    )


def assert_equal(spark_out, ref):
    emitted, late, slack, obs, _ = spark_out
    assert emitted["wid"].tolist() == ref.window_ids.tolist()
    np.testing.assert_allclose(emitted["value"].to_numpy(), ref.values, rtol=1e-9, atol=1e-12)
    assert emitted["n_rcv"].tolist() == ref.received.tolist()
    assert emitted["emitted_at"].tolist() == ref.emitted_at.tolist()
    assert emitted["slack_at_close"].tolist() == ref.slack_at_close.tolist()
    assert emitted["lag_us"].tolist() == ref.lag_us.tolist()
    np.testing.assert_allclose(emitted["lambda_thr"].to_numpy(), ref.lambda_thr, rtol=1e-9)
    assert late == sorted(zip(ref.late_arrival.tolist(), ref.late_window.tolist(), strict=True))
    assert slack == ref.slack.tolist()
    assert obs["wid"].tolist() == ref.obs_window.tolist()
    assert obs["obs_at"].tolist() == ref.obs_at.tolist()
    assert obs["n_rcv"].tolist() == ref.obs_received.tolist()
    assert obs["n_late"].tolist() == ref.obs_late.tolist()
    assert obs["needed_us"].tolist() == ref.obs_needed_us.tolist()


@pytest.mark.parametrize(
    ("mode", "agg", "batch", "rows_per_task"),
    [
        ("hpm", "sum", 40, 2_000_000),
        ("hpm", "median", 1000, 17),  # the batch's scan split into 8 ranges with carried state
        ("mp", "max", 25, 9),
        ("fixed", "quantile:0.9", 60, 2_000_000),
        ("hpm", "count", 30, 2_000_000),
    ],
)
def test_micro_batches_reproduce_the_reference(spark, mode, agg, batch, rows_per_task):
    ts, vals = make_stream(5, 120, MODELS[0])
    q = WindowQuery(Windows(200, 50), agg, coverage_horizon_us=150)
    got = run_spark(spark, ts, vals, q, mode, batch, rows_per_task=rows_per_task)
    assert_equal(got, reference(ts, vals, q, mode, batch))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 90),
    model=st.sampled_from(MODELS),
    agg=st.sampled_from(["sum", "avg", "min", "quantile:0.25"]),
    batch=st.sampled_from([13, 45, 200]),
    final=st.booleans(),
)
def test_differential_over_seeds_delay_models_and_batch_sizes(spark, seed, n, model, agg, batch, final):
    ts, vals = make_stream(seed, n, model)
    q = WindowQuery(Windows(200, 50), agg, coverage_horizon_us=100)
    assert_equal(
        run_spark(spark, ts, vals, q, "hpm", batch, final), reference(ts, vals, q, "hpm", batch, final)
    )


@pytest.mark.parametrize(("agg", "batch", "rows_per_task"), [("sum", 40, 2_000_000), ("count", 70, 23)])
def test_the_lateness_policy_over_micro_batches_reproduces_the_reference(spark, agg, batch, rows_per_task):
    # delays of milliseconds: the lateness profiles span many buckets, carried across batches
    ts, vals = ms_stream(11, 150)
    q = WindowQuery(Windows(200_000, 50_000), agg, 0.1, 0.1, coverage_horizon_us=300_000)
    got = run_spark(spark, ts, vals, q, "lateness", batch, rows_per_task=rows_per_task)
    ref = reference(ts, vals, q, "lateness", batch)
    assert len(set(ref.obs_needed_us.tolist())) > 1  # some windows needed a wait: the profiles matter
    assert_equal(got, ref)


def test_the_lateness_policy_fixes_a_batchs_k_on_its_late_members_as_the_reference_does(spark):
    # a stream where late members of closed windows arrive in the batch that needs the larger K
    ts, vals = make_stream(17, 120, MODELS[0])
    q = WindowQuery(Windows(200, 50), "sum", 0.1, 0.1, coverage_horizon_us=150)
    got = run_spark(spark, ts, vals, q, "lateness-short", 30)
    assert got[4] > 0  # the pre-pass moved K before some batch
    assert_equal(got, reference(ts, vals, q, "lateness-short", 30))
