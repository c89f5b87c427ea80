"""The top-k stream stage: one pass per run, the same rows whatever the cadence, idempotent, checked."""

from dataclasses import replace
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from outoforder.config import StreamSettings
from outoforder.core.topk.cache import CacheDurationController, LatenessController
from outoforder.core.topk.operator import ContinuousTopK
from outoforder.errors import ConfigError, QualityError, StateError
from outoforder.io import delta
from outoforder.io.tables import TOPK_LEDGER, TOPK_RESULTS, TOPK_STATE, VOLATILE_COLUMNS
from outoforder.sources.disorder import inject
from outoforder.stages.context import StageContext
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import TopKStream
from outoforder.stages.topk.validate import validate_topk, window_accuracy

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/topk-stream"
# 1 s windows sliding by 0.1 s; the paper's controller decides every 5 queries over 4 candidates
JOB = TopKJob(
    k=3, window_us=1_000_000, slide_us=100_000, eps_min=0.9, controller="paper", initial_cache_us=200_000,
    m=4, n=5, min_step_us=5_000, horizon_us=300_000,
)  # fmt: skip
T0 = 1_700_000_000_000_000
STEP = 1_000


def arrivals(n=2_000, seed=5):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 4_000_000, n)) + 10_000_000_000
    value = np.round(rng.random(n), 4)
    value[::97] = np.nan  # not ranked, counted
    o = inject(ts, "exponential:mean=0.05,late_prob=0.5", seed).order
    return pd.DataFrame({"stream": "s", "event_ts": ts[o], "value": value[o]})


def table(spark, settings, t, job=JOB, kind=None):
    df = delta.read(spark, t, settings.lake_root).where(F.col("job") == job.job_id())
    if kind is not None:
        df = df.where(F.col("kind") == kind)
    cols = [c for c in df.columns if c not in VOLATILE_COLUMNS]
    return df.select(*cols).toPandas().sort_values(cols[2:5]).reset_index(drop=True)


def rows(spark, lake, t, where=None):
    df = delta.read(spark, t, lake)
    if where is not None:
        df = df.where(where)
    frame = df.drop(*(c for c in df.columns if c in VOLATILE_COLUMNS)).toPandas()
    keys = [c for c in frame.columns if c not in ("accuracy", "lateness")]
    return frame.sort_values(keys).reset_index(drop=True)


def test_any_cadence_gives_the_rows_of_one_pass_and_of_the_operator(spark, run_at_cadences):
    frame = arrivals()
    n = len(frame)
    lakes = run_at_cadences(TopKStream, JOB, frame, SOURCE, seed=3)
    want = {t: rows(spark, lakes["one"], t) for t in (TOPK_RESULTS, TOPK_LEDGER)}
    for name, lake in lakes.items():
        for t in (TOPK_RESULTS, TOPK_LEDGER):
            pd.testing.assert_frame_equal(rows(spark, lake, t), want[t], obj=f"{name}: {t.name}")
        newest = delta.read(spark, TOPK_STATE, lake).agg(F.max("as_of_us")).first()[0]
        state = delta.read(spark, TOPK_STATE, lake).where(F.col("as_of_us") == newest).first()
        assert (state["arrivals"], state["scalars"]) == (n, json_state(spark, lakes["one"])), name

    # one uninterrupted run of the pure operator over the scored arrivals
    op = ContinuousTopK(JOB.query(), CacheDurationController(JOB.cache_settings()))
    lists = {}
    for seq, (ts, v) in enumerate(zip(frame["event_ts"], frame["value"], strict=True)):
        if not np.isnan(v):
            lists.update({e.window_id: e.tids for e in op.process(int(ts), float(v), seq).emitted})
    res = want[TOPK_RESULTS]
    got = {
        w: g.dropna(subset=["rank"]).sort_values("rank")["seq"].astype(int).tolist()
        for w, g in res.groupby("window_id")
    }
    assert got == lists
    trace = want[TOPK_LEDGER][want[TOPK_LEDGER]["kind"] == "decision"].sort_values("seq")
    assert len(trace) == len(op.decisions) > 0  # the K_min trace, one row per decision
    assert trace["k_min_us"].tolist() == [d.k_min_us for d in op.decisions]


def json_state(spark, lake):
    newest = delta.read(spark, TOPK_STATE, lake).agg(F.max("as_of_us")).first()[0]
    return delta.read(spark, TOPK_STATE, lake).where(F.col("as_of_us") == newest).first()["scalars"]


def test_passes_rerun_nothing_and_the_checks_judge_what_closed(spark, settings, load_bronze):
    frame = arrivals()
    load_bronze(frame, SOURCE)
    n = len(frame)
    bounds = [T0 + c * STEP for c in (0, 700, 1_300, n)]
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    summaries = [TopKStream(ctx).run(lo, hi, catch_up=True) for lo, hi in pairwise(bounds)]
    assert sum(s.arrivals for s in summaries) == n
    assert sum(s.unscored for s in summaries) == int(frame["value"].isna().sum())

    before = {t.name: table(spark, settings, t) for t in (TOPK_RESULTS, TOPK_LEDGER)}
    assert TopKStream(ctx).run(bounds[1], bounds[2]) is None  # processed already: nothing written
    for t in (TOPK_RESULTS, TOPK_LEDGER):
        pd.testing.assert_frame_equal(table(spark, settings, t), before[t.name])

    judged = window_accuracy(ctx)
    assert judged["accounted"].all() and (judged["emissions"] <= 1).all()
    # "all late" by its definition: every scored member of the window has a late row for it
    late = table(spark, settings, TOPK_LEDGER, kind="late").groupby("window_id")["seq"].agg(set).to_dict()
    members: dict[int, set[int]] = {}
    for seq, (ts, v) in enumerate(zip(frame["event_ts"], frame["value"], strict=True)):
        if not np.isnan(v):
            for w in JOB.windows().ids_of(int(ts)):
                members.setdefault(int(w), set()).add(seq)
    want_late = {w: m <= late.get(w, set()) for w, m in members.items()}
    assert dict(zip(judged["window_id"], judged["all_late"], strict=True)) == {
        w: want_late[w] for w in judged["window_id"]
    }
    assert not judged["all_late"].all()
    closed = judged[judged["closed"]]
    assert len(closed) > 10 and closed["hit_rate"].mean() >= JOB.eps_min
    # a check over a data interval judges the windows emitted or closed in it, as a full check then would
    then = window_accuracy(ctx, bounds[1])
    seen = {col: set(then.loc[then[col], "window_id"]) for col in ("complete", "closed")}
    for since, until in pairwise(bounds[1:]):
        part = window_accuracy(ctx, until, since)
        then = judged if until == bounds[-1] else window_accuracy(ctx, until)
        for col, done in seen.items():
            mine = part[part[col]].sort_values("window_id").reset_index(drop=True)
            fresh = (
                then[then[col] & ~then["window_id"].isin(done)]
                .sort_values("window_id")
                .reset_index(drop=True)
            )
            pd.testing.assert_frame_equal(mine.drop(columns=list(seen)), fresh.drop(columns=list(seen)))
            done |= set(then.loc[then[col], "window_id"])
    assert seen["closed"] == set(closed["window_id"])
    suites = validate_topk(ctx)
    assert all(s.success for s in suites)

    # a duplicated window emission fails completeness
    path = TOPK_RESULTS.path(settings.lake_root)
    dup = delta.read(spark, TOPK_RESULTS, settings.lake_root).where("rank = 1").limit(1)
    dup.write.format("delta").mode("append").save(path)
    with pytest.raises(QualityError):
        validate_topk(ctx)


def test_skipping_arrivals_or_the_state_budget_fails_and_bad_jobs_are_refused(spark, settings, load_bronze):
    load_bronze(arrivals(300, 2), SOURCE)
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    first = TopKStream(ctx).run(T0, T0 + 100 * STEP)
    assert first is not None
    with pytest.raises(StateError, match="would skip"):  # [100, 200) would be skipped
        TopKStream(ctx).run(T0 + 200 * STEP, T0 + 300 * STEP)

    # a state over the budget fails the pass before its state is written; with room, it reruns
    tight = replace(settings, stream=StreamSettings(state_budget_rows=first.candidates))
    with pytest.raises(StateError, match="state_budget_rows"):
        TopKStream(StageContext.of(spark, tight, SOURCE, JOB)).run(None, T0 + 200 * STEP)
    states = delta.read(spark, TOPK_STATE, settings.lake_root).where(F.col("job") == JOB.job_id())
    assert states.where(F.col("as_of_us") == T0 + 200 * STEP).count() == 0
    again = TopKStream(ctx).run(None, T0 + 200 * STEP)
    assert again is not None and again.arrivals == 100

    # a damaged snapshot is refused on the driver, naming it, before any task runs
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, TOPK_STATE.path(settings.lake_root)).update(
        F.col("as_of_us") == T0 + 200 * STEP, {"scalars": F.lit('{"operator": 1}')}
    )
    with pytest.raises(StateError, match="unreadable"):
        TopKStream(ctx).run(None, T0 + 300 * STEP)
    with pytest.raises(ConfigError):
        TopKJob(score="speed")
    with pytest.raises(ConfigError):
        TopKJob(k=0)


def test_the_lateness_controller_states_feasibility_and_the_check_tells_shortfall_from_out_of_reach(
    spark, settings, load_bronze
):
    """Hard disorder: the bound puts ε_min out of reach (a warning); a short seed K misses it (a failure)."""
    source = "test/topk-feasibility"
    rng = np.random.default_rng(9)
    n = 1_500
    ts = np.sort(rng.integers(0, 3_000_000, n)) + 10_000_000_000
    o = inject(ts, "exponential:mean=0.4,late_prob=0.9", 9).order
    frame = pd.DataFrame({"stream": "s", "event_ts": ts[o], "value": np.round(rng.random(n), 4)[o]})
    load_bronze(frame, source)
    query = {"k": 3, "window_us": 1_000_000, "slide_us": 100_000, "eps_min": 0.95, "horizon_us": 1_500_000}
    bounded = TopKJob(**query, n=5, initial_cache_us=20_000, latency_bound_us=30_000)
    assert bounded.controller == "lateness"  # the default
    bounds = [T0, T0 + 800 * STEP, T0 + n * STEP]
    summaries = [
        TopKStream(StageContext.of(spark, settings, source, bounded)).run(lo, hi, catch_up=True)
        for lo, hi in pairwise(bounds)
    ]

    op = ContinuousTopK(bounded.query(), LatenessController(bounded.cache_settings()))  # type: ignore[arg-type]
    for seq, (x, v) in enumerate(zip(frame["event_ts"], frame["value"], strict=True)):
        op.process(int(x), float(v), seq)
    settled = table(spark, settings, TOPK_LEDGER, bounded, kind="settled").sort_values(["seq", "window_id"])
    assert settled["window_id"].tolist() == [x.window_id for x in op.settled] != []
    assert settled["hit"].tolist() == [x.hit for x in op.settled]
    assert [list(v) for v in settled["lateness"]] == [list(x.lateness) for x in op.settled]
    trace = table(spark, settings, TOPK_LEDGER, bounded, kind="decision").sort_values("seq")
    assert trace["k_min_us"].max() == 30_000 and trace["needed_us"].max() > 30_000
    assert trace["reachable"].tolist() == [d.reachable for d in op.decisions]
    assert any("out of reach under the bound of 0.03 s" in s.figures() for s in summaries)

    # out of reach under the bound: reported (feasibility failed), not raised, even when failing is on
    suites = {
        s.suite: s.success
        for s in validate_topk(StageContext.of(spark, settings, source, bounded), fail=True)
    }
    assert suites["topk_feasibility"] is False and suites["topk_accuracy"] is False
    # the seed's controller stuck at a short K under a loose bound: the target was reachable, a failure
    stuck = TopKJob(
        **query, controller="paper", initial_cache_us=20_000, m=2, n=10_000, latency_bound_us=3_000_000
    )
    for lo, hi in pairwise(bounds):
        TopKStream(StageContext.of(spark, settings, source, stuck)).run(lo, hi, catch_up=True)
    with pytest.raises(QualityError, match="topk_accuracy"):
        validate_topk(StageContext.of(spark, settings, source, stuck), fail=True)
