"""The pass skeleton's rules (:mod:`outoforder.stages.passes`), on the stream stages: a pass costs a
handful of Spark jobs and commits whatever its span, a run over processed arrivals writes nothing,
a scheduled run catches up in one pass and never runs ahead of the ingest, and old snapshots go."""

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from benchmarks.reliability import commits
from outoforder.errors import StateError
from outoforder.io import delta, deltalog
from outoforder.io.tables import AGG_RESULTS, AGG_STATE, INGEST_LOG
from outoforder.stages import passes
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.aggregate.validate import validate_aggregate
from outoforder.stages.context import StageContext
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import JoinStream
from outoforder.stages.join.validate import validate_join
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import TopKStream
from outoforder.stages.topk.validate import validate_topk

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/skeleton"
JOB = AggJob(window_us=50_000, slide_us=10_000, coverage_horizon_us=100_000, initial_k_us=20_000)
T0 = 1_700_000_000_000_000
STEP = 1_000  # arrival_ts step of load_bronze: arrival i at T0 + i·STEP
# a stream stage's pass: at most this many Spark jobs and Delta commits, whatever its span (issue 73)
JOBS_PER_PASS = 8
COMMITS_PER_PASS = 3


def arrivals(n=300, seed=2, span_us=300_000):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, span_us, n)) + 10_000_000_000
    return pd.DataFrame({
        "stream": np.where(rng.random(n) < 0.4, "ball", "team_a"), "event_ts": ts[rng.permutation(n)],
        "value": rng.gamma(2.0, 3.0, n), "x": rng.uniform(0, 10, n), "y": rng.uniform(0, 10, n),
    })  # fmt: skip


def at(i):
    return T0 + i * STEP


TOPK = TopKJob(
    score="value",
    k=3,
    window_us=100_000,
    slide_us=50_000,
    initial_cache_us=20_000,
    n=3,
    m=3,
    horizon_us=100_000,
)
JOIN = JoinJob(s_streams=("team_a",), window_us=20_000, theta=3.0, period_us=400_000, interval_us=100_000)
STAGES = {"join": (JoinStream, JOIN), "aggregate": (AggregateStream, JOB), "topk": (TopKStream, TOPK)}


@pytest.mark.parametrize("name", list(STAGES))
def test_a_pass_costs_a_handful_of_spark_jobs_and_commits_whatever_its_span(
    spark, settings, load_bronze, name
):
    # counted on a warm session, after the job's first pass (which creates its tables); the ingest
    # log covers the source, as the file ingest leaves it, so no pass reads bronze to find its end
    load_bronze(arrivals(n=2_400), SOURCE)
    done = [("log", "done", 0, SOURCE, "f", "", 0, "r", 0, 0, 0, 0, 0, 0, None, None, at(2_400))]
    log = spark.createDataFrame(done, INGEST_LOG.schema)
    delta.merge_new(log, INGEST_LOG, settings.lake_root, ("ingest_id", "status"))
    kind, job = STAGES[name]
    ctx = StageContext.of(spark, settings, SOURCE, job)
    sc = spark.sparkContext
    kind(ctx).run(at(0), at(100))
    spans = [(100, 200), (200, 1_200), (1_200, 1_300), (1_300, 2_400)]  # a minute, ten, a minute, the rest
    for i, (lo, hi) in enumerate(spans):
        before = commits(settings.lake_root)
        sc.setJobGroup(f"pass-{name}-{i}", "a pass")
        summary = kind(ctx).run(at(lo), at(hi))
        sc.setJobGroup("", "")
        jobs = len(sc.statusTracker().getJobIdsForGroup(f"pass-{name}-{i}"))
        assert summary is not None and summary.arrivals == hi - lo
        assert jobs <= JOBS_PER_PASS, (lo, hi, jobs)
        assert commits(settings.lake_root) - before <= COMMITS_PER_PASS


def test_a_run_over_processed_arrivals_writes_nothing_and_a_scheduled_run_catches_up(
    spark, settings, load_bronze
):
    load_bronze(arrivals(), SOURCE)
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    first = AggregateStream(ctx).run(at(0), at(50))
    assert first is not None and (first.start_us, first.end_us, first.arrivals) == (at(0), at(50), 50)
    versions = {t.name: deltalog.newest_version(t.path(settings.lake_root)) for t in (AGG_RESULTS, AGG_STATE)}
    assert AggregateStream(ctx).run(at(0), at(50)) is None  # processed: nothing to do, no commit
    assert AggregateStream(ctx).run(at(10), at(30), catch_up=True) is None
    assert versions == {
        t.name: deltalog.newest_version(t.path(settings.lake_root)) for t in (AGG_RESULTS, AGG_STATE)
    }
    # a scheduled run whose interval starts past where the job stands: one pass from there
    with pytest.raises(StateError, match="would skip"):
        AggregateStream(ctx).run(at(120), at(170))
    caught = AggregateStream(ctx).run(at(120), at(170), catch_up=True)
    assert caught is not None and (caught.start_us, caught.end_us, caught.arrivals) == (at(50), at(170), 120)
    # long after the last arrival: up to the newest arrival in bronze (a file not ingested yet may
    # still fill the rest: the pass does not run ahead of what the ingest delivered)
    far = at(300) + 10**9
    tail = AggregateStream(ctx).run(far - 60_000_000, far, catch_up=True)
    assert tail is not None and (tail.start_us, tail.end_us) == (at(170), at(299) + 1)
    assert AggregateStream(ctx).run(far - 60_000_000, far, catch_up=True) is None
    # an ingest of the source at `far`: everything that arrived before it is in bronze
    done = [("log", "done", 0, SOURCE, "f", "", 0, "r", 0, 0, 0, 0, 0, 0, None, None, far)]
    delta.merge_new(
        spark.createDataFrame(done, INGEST_LOG.schema),
        INGEST_LOG,
        settings.lake_root,
        ("ingest_id", "status"),
    )
    quiet = AggregateStream(ctx).run(far - 60_000_000, far, catch_up=True)
    assert quiet is not None and (quiet.start_us, quiet.end_us, quiet.arrivals) == (at(299) + 1, far, 0)
    results = delta.read(spark, AGG_RESULTS, settings.lake_root).where(F.col("source") == SOURCE)
    assert results.count() == results.select("window_id").distinct().count() > 0


def test_a_run_over_years_without_arrivals_is_one_pass(spark, settings, load_bronze):
    # four arrivals a year apart: one pass, however many minutes the scheduler would have cut
    year = 365 * 86_400 * 1_000_000
    load_bronze(arrivals(n=4), "test/gap", step=year)
    summary = AggregateStream(StageContext.of(spark, settings, "test/gap", JOB)).run()
    assert summary is not None and summary.arrivals == 4
    assert (summary.start_us, summary.end_us) == (T0, T0 + 3 * year + 1)


def test_old_state_snapshots_are_pruned_in_steps(spark, settings, load_bronze, monkeypatch):
    load_bronze(arrivals(), SOURCE)
    monkeypatch.setattr(passes, "PRUNE_EVERY", 3)
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    for k in range(1, 8):
        AggregateStream(ctx).run(at(0), at(30 * k), catch_up=True)
    kept = sorted(
        r[0]
        for r in delta.read(spark, AGG_STATE, settings.lake_root)
        .where(F.col("kind") == "state")
        .select("as_of_us")
        .collect()
    )
    # pruned after the 3rd and 6th pass down to 2 snapshots: the 5th, 6th and the 7th since
    assert kept == [at(150), at(180), at(210)]
    pos = AggregateStream(ctx).position()
    assert pos is not None and pos.passes == 7 and pos.as_of_us == at(210)


JOBS_PER_CHECK = 3  # a check of one run's interval, whatever the history (issue 73)
CHECKS = {
    "join": lambda ctx, lo, hi: validate_join(ctx, hi, fail=False, since_us=lo),
    "aggregate": lambda ctx, lo, hi: validate_aggregate(ctx, fail=False, until_us=hi, since_us=lo),
    "topk": lambda ctx, lo, hi: validate_topk(ctx, fail=False, until_us=hi, since_us=lo),
}


@pytest.mark.parametrize("name", list(STAGES))
def test_a_check_and_the_report_cost_a_handful_of_spark_jobs(spark, settings, load_bronze, name):
    # what a DAG run does after its pass: the check of its interval and its page of the report
    from outoforder.quality.report import build_reports

    frame = arrivals(n=2_400, span_us=2_400_000)
    frame["event_ts"] = np.sort(frame["event_ts"].to_numpy()) - np.random.default_rng(3).integers(
        0, 30_000, 2_400
    )
    load_bronze(frame, SOURCE)  # mild disorder: the periods and windows close run by run
    kind, job = STAGES[name]
    ctx = StageContext.of(spark, settings, SOURCE, job)
    sc = spark.sparkContext
    spans = [(0, 800), (800, 1_600), (1_600, 2_400)]
    for i, (lo, hi) in enumerate(spans):
        kind(ctx).run(at(lo), at(hi))
        sc.setJobGroup(f"check-{name}-{i}", "a check")
        CHECKS[name](ctx, at(lo), at(hi))
        sc.setJobGroup(f"report-{name}-{i}", "a report")
        build_reports(spark, settings, f"run-{i}", at(lo), at(hi), sections=[name], due=(False, True))
        sc.setJobGroup("", "")
        checks = len(sc.statusTracker().getJobIdsForGroup(f"check-{name}-{i}"))
        reports = len(sc.statusTracker().getJobIdsForGroup(f"report-{name}-{i}"))
        # the first one too: where the join's periods start is in the state, not scanned for
        assert checks <= JOBS_PER_CHECK, (i, checks)
        assert reports == 0, (i, reports)  # the report reads small tables on the driver
