"""The HPM aggregate stage: one pass per run, the same rows whatever the cadence, repaired, checked."""

from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from outoforder.core.windows.hpm import buffered_reference
from outoforder.core.windows.slack import HPMSlack
from outoforder.errors import QualityError, StateError
from outoforder.io import delta, deltars
from outoforder.io.tables import AGG_LEDGER, AGG_REPAIRS, AGG_RESULTS, AGG_STATE, VOLATILE_COLUMNS
from outoforder.sources.disorder import inject
from outoforder.stages.aggregate.ledger import ledger_status, read_status
from outoforder.stages.aggregate.repair import repair
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.aggregate.validate import repaired_windows, validate_aggregate, window_quality
from outoforder.stages.context import StageContext

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/agg-o'hare"  # a quote: every SQL condition the stage writes is escaped
JOB = AggJob(
    window_us=50_000,
    slide_us=10_000,
    coverage_horizon_us=100_000,
    gamma_us=300_000,
    alpha_initial=0.3,
    initial_k_us=20_000,
    memory=20,
)
SEED = AggJob(**{**JOB.__dict__, "controller": "paper"})
T0 = 1_700_000_000_000_000
STEP = 1_000


def arrivals(n=1_200, seed=4):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 1_200_000, n)) + 10_000_000_000
    value = np.round(rng.gamma(2.0, 3.0, n), 3)
    o = inject(ts, "pareto:xm=0.004,alpha=1.3,late_prob=0.6", seed).order
    return pd.DataFrame({"stream": "s", "event_ts": ts[o], "value": value[o]})


def results(spark, settings, job=JOB):
    df = delta.read(spark, AGG_RESULTS, settings.lake_root).where(F.col("job") == job.job_id())
    return df.toPandas().sort_values("window_id").reset_index(drop=True)


def rows(spark, lake, table, where=None):
    """A table's rows without the columns that say when or in how many runs they were written."""
    df = delta.read(spark, table, lake)
    if where is not None:
        df = df.where(where)
    frame = df.drop(*(c for c in df.columns if c in VOLATILE_COLUMNS)).toPandas()
    return frame.sort_values(list(c for c in frame.columns if c != "caused_by")).reset_index(drop=True)


def newest_state(spark, lake):
    last = delta.read(spark, AGG_STATE, lake).agg(F.max("as_of_us")).first()[0]
    return rows(spark, lake, AGG_STATE, F.col("as_of_us") == last)


@pytest.mark.parametrize("job", [JOB, SEED], ids=["lateness", "paper"])
def test_any_cadence_gives_the_rows_of_one_pass_and_of_the_operator(spark, run_at_cadences, job):
    # one run, runs of a scheduler's minute, of random lengths, and with a run killed between its results
    # and its state: the same windows, ledger and state, those of HPM's operator
    frame = arrivals()
    # the seed's controller through one run and random ones (the cadences' machinery is the same
    # whatever the controller; what differs is the scalars it carries from pass to pass)
    only = None if job is JOB else ("one", "random")
    lakes = run_at_cadences(AggregateStream, job, frame, SOURCE, seed=7, only=only)
    want = {t: rows(spark, lakes["one"], t) for t in (AGG_RESULTS, AGG_LEDGER)}
    want_state = newest_state(spark, lakes["one"])
    for name, lake in lakes.items():
        for t in (AGG_RESULTS, AGG_LEDGER):
            pd.testing.assert_frame_equal(rows(spark, lake, t), want[t], obj=f"{name}: {t.name}")
        pd.testing.assert_frame_equal(newest_state(spark, lake), want_state, obj=f"{name}: state")

    # the operator's own results over the whole stream, its policy seeing each observation at once
    policy = job.lateness() if job.controller == "lateness" else HPMSlack(job.pd_controller())
    ref = buffered_reference(
        frame["event_ts"].to_numpy(), frame["value"].to_numpy(), job.query(), policy, flush=False
    )
    got = want[AGG_RESULTS].sort_values("window_id")
    assert got["window_id"].tolist() == ref.window_ids.tolist()
    assert got["stream_value"].tolist() == ref.values.tolist()  # bit for bit: summed in the same order
    assert got["n_tuples"].tolist() == ref.received.tolist()
    assert got["slack_us"].tolist() == ref.slack_at_close.tolist()
    assert got["emitted_at_seq"].tolist() == ref.emitted_at.tolist()
    assert (got["version"] == 1).all() and (got["produced_by"] == "stream").all()
    ledger = want[AGG_LEDGER]
    late = ledger[ledger["kind"] == "late"]
    assert sorted(zip(late["seq"], late["window_id"], strict=True)) == sorted(
        zip(ref.late_arrival.tolist(), ref.late_window.tolist(), strict=True)
    )
    assert len(late) > 50
    seen = ledger[ledger["kind"] == "observed"].sort_values(["seq", "window_id"])
    assert seen["window_id"].tolist() == ref.obs_window.tolist()
    assert seen["needed_us"].tolist() == ref.obs_needed_us.tolist()  # the feasibility statistics
    assert seen["slack_after_us"].notna().all()


JOBS_PER_REPAIR = 3


def test_passes_then_repair_make_every_window_exact_and_checks_judge_what_closed(
    spark, settings, load_bronze, monkeypatch
):
    frame = arrivals()
    load_bronze(frame, SOURCE, 0)
    n = len(frame)
    bounds = [T0 + c * STEP for c in (0, 500, 900, n)]
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    summaries = [AggregateStream(ctx).run(lo, hi, catch_up=True) for lo, hi in pairwise(bounds)]
    assert sum(s.arrivals for s in summaries) == n
    last = summaries[-1]
    assert last.controller == "lateness" and last.needed_us is not None and last.reachable == 1.0
    assert last.slack_next_us is not None and "the target needs K" in last.figures()
    ledger = delta.read(spark, AGG_LEDGER, settings.lake_root).where("kind = 'late'").toPandas()

    # a run over processed arrivals writes nothing
    before = {t.name: rows(spark, settings.lake_root, t) for t in (AGG_RESULTS, AGG_LEDGER)}
    assert AggregateStream(ctx).run(bounds[1], bounds[2]) is None
    for t in (AGG_RESULTS, AGG_LEDGER):
        pd.testing.assert_frame_equal(before[t.name], rows(spark, settings.lake_root, t))

    # a check over a data interval judges the windows closed in it, as a check of everything then would
    then = window_quality(ctx, bounds[1])
    done = set(then["wid"])
    for since, until in pairwise(bounds[1:]):
        part = window_quality(ctx, until, since)
        then = window_quality(ctx, until)
        pd.testing.assert_frame_equal(part, then[~then["wid"].isin(done)].reset_index(drop=True))
        assert len(part) > 3
        done |= set(then["wid"])

    # stream results miss (ε, δ)? then a forced repair makes everything exact. Its first attempt is
    # killed between the results' write and its log row (the reliability run found it: the rerun
    # logged 0 windows changed, comparing against results the first attempt had already fixed)
    replace_rows, intended = deltars.replace_rows, []
    volatile = ("seconds", "written_at_us")

    def killed_before_the_log(table, *args, **kwargs):
        if table is AGG_REPAIRS:
            rows = args[2]
            names = AGG_REPAIRS.schema.fieldNames()
            intended.extend({n: v for n, v in zip(names, r, strict=True) if n not in volatile} for r in rows)
            raise RuntimeError("killed")
        return replace_rows(table, *args, **kwargs)

    assert repaired_windows(ctx) == (0, -1)  # no repair yet: nothing to judge
    monkeypatch.setattr(deltars, "replace_rows", killed_before_the_log)
    with pytest.raises(RuntimeError, match="killed"):
        repair(ctx, force=True)
    monkeypatch.setattr(deltars, "replace_rows", replace_rows)
    (row,) = intended
    sc = spark.sparkContext
    sc.setJobGroup("repair", "a repair")
    first = repair(ctx, force=True)
    sc.setJobGroup("", "")
    # one scan of bronze's affected windows; the ledger and the results are driver reads and writes
    assert len(sc.statusTracker().getJobIdsForGroup("repair")) <= JOBS_PER_REPAIR
    assert first.ran and first.changed > 0
    assert (first.changed, first.added) == (row["windows_changed"], row["windows_added"])
    assert first.rows_read == first.affected_rows
    logged = delta.read(spark, AGG_REPAIRS, settings.lake_root).drop(*volatile).collect()
    assert [r.asDict() for r in logged] == [row]
    again = repair(ctx, force=True)
    assert not again.ran  # nothing pending any more
    fixed = results(spark, settings, JOB)
    quality = window_quality(ctx)
    assert quality["exact_now"].all() and (quality["pending"] == 0).all()
    rewritten = fixed[fixed["version"] > 1]
    assert len(rewritten) == first.changed  # rewritten once, not twice
    assert fixed["version"].max() == 2
    assert (rewritten["produced_by"] == "repair").all() and rewritten["final"].all()
    assert rewritten["previous_value"].notna().all() and rewritten["caused_by"].map(len).min() >= 1
    assert fixed["window_id"].is_unique
    validate_aggregate(ctx, fail=False)

    # late_repair's check judges the windows the repair recomputed, as a check of everything would
    late = (int(ledger["window_id"].min()), int(ledger["window_id"].max()))
    assert (row["first_window"], row["last_window"]) == late == repaired_windows(ctx)
    part = window_quality(ctx, windows=late)
    inside = quality[quality["wid"].between(*late)].reset_index(drop=True)
    pd.testing.assert_frame_equal(part, inside)
    assert 0 < len(part) <= len(quality)
    suites = validate_aggregate(ctx, fail=True, repaired=True)
    # exactness and presence; (ε, δ) at emission is judged as windows close, not on the late ones
    assert {s.suite for s in suites} == {"agg_results", "agg_quality"}


def test_gamma_rule_waits_until_the_late_tuples_span_more_than_gamma(spark, settings, load_bronze):
    frame = arrivals(n=800, seed=9)
    load_bronze(frame, SOURCE, 0)
    AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run(T0, T0 + 400 * STEP)
    wide = repair(StageContext.of(spark, settings, SOURCE, AggJob(**{**JOB.__dict__, "gamma_us": 10**9})))
    assert not wide.ran and "Γ" in wide.reason
    with pytest.raises(StateError, match="would skip"):  # arrivals 400..499 would be skipped
        AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run(T0 + 500 * STEP, T0 + 600 * STEP)
    # repairing after each interval, the stage leaves the status a fresh look at the ledger gives:
    # with Γ out of reach the late tuples stay pending; with the job's Γ a repair empties the ledger
    waiting = AggJob(**{**JOB.__dict__, "gamma_us": 10**9})  # the same job (Γ does not identify it)
    AggregateStream(StageContext.of(spark, settings, SOURCE, waiting), repair_each=True).run(
        T0 + 400 * STEP, T0 + 600 * STEP, catch_up=True
    )
    status = read_status(settings, SOURCE, waiting)
    assert status == ledger_status(StageContext.of(spark, settings, SOURCE, waiting))
    assert status["pending_late_tuples"] > 0 and not status["repair_due"]
    AggregateStream(StageContext.of(spark, settings, SOURCE, JOB), repair_each=True).run(
        T0 + 600 * STEP, T0 + 800 * STEP, catch_up=True
    )
    status = read_status(settings, SOURCE, JOB)
    assert status == ledger_status(StageContext.of(spark, settings, SOURCE, JOB))
    assert status["pending_late_tuples"] == 0


def test_validate_fails_on_a_target_the_stream_cannot_meet(spark, settings, load_bronze):
    frame = arrivals(n=600, seed=5)
    load_bronze(frame, SOURCE, 0)
    strict = AggJob(  # HPM's controller held at α = 0 (never waits), under a bound it never uses
        **{
            **SEED.__dict__,
            "latency_bound_us": 10_000_000,
            "eps": 0.001,
            "delta": 0.001,
            "alpha_initial": 0.0,
            "alpha_min": 0.0,
            "k_p": 0.0,
            "k_d": 0.0,
        }
    )
    ctx = StageContext.of(spark, settings, SOURCE, strict)
    AggregateStream(ctx).run(T0, T0 + 600 * STEP)
    with pytest.raises(QualityError, match="agg_error"):  # reachable under the bound: a shortfall
        validate_aggregate(ctx, fail=True)


def test_a_bound_that_forbids_the_target_is_a_warning_naming_the_bound_it_needs(
    spark, settings, load_bronze, caplog
):
    frame = arrivals(n=600, seed=5)
    load_bronze(frame, SOURCE, 0)
    tight = AggJob(**{**JOB.__dict__, "eps": 0.01, "latency_bound_us": 500})  # delays of ms, K at most 0.5 ms
    ctx = StageContext.of(spark, settings, SOURCE, tight)
    summary = AggregateStream(ctx).run(T0, T0 + 600 * STEP)
    assert summary is not None
    assert summary.slack_next_us is not None and summary.slack_next_us <= 500
    assert summary.reachable is not None and summary.reachable < 0.95
    assert "out of reach under the bound of 0.0005 s" in summary.figures()
    with caplog.at_level("WARNING"):
        suites = validate_aggregate(ctx, fail=True)  # no failure: a configuration matter
    verdicts = {r.suite: r.success for r in suites}
    assert verdicts["agg_feasibility"] is False and verdicts["agg_error"] is False
    assert verdicts["agg_quality"] and verdicts["agg_results"]
    assert "needs a bound of at least" in caplog.text and "--latency-bound-s" in caplog.text
