"""The main job (``python -m outoforder.stages demo``): every operator once, on the embedded default.

The steps, in order (``--steps`` runs a subset; the ``pipeline`` DAG runs one task per step):

1. ``ingest``: the real datasets of the shared data folder into bronze;
2. ``replay``: synthetic soccer play delayed by a disorder preset, ingested;
3. ``stats``: disorder statistics of every source (also to ``disorder_stats.json``);
4. ``bronze``: Great Expectations over bronze;
5. ``join``: QJoin and the K-slack baselines side by side against the exact join;
6. ``stream-join``: the stream join as the ``join_stream`` DAG runs it, a pass per step of arrival
   time with the retention adapted every L inside it, then its recall check;
7. ``aggregates``: HPM's sliding-window sums with a Γ-rule repair check after each interval and a
   final forced repair, then the (ε, δ) and exactness checks;
8. ``theta``: a θ-join backfill over the replay's event time, then its completeness check;
9. ``topk``: the continuous top-k with its adaptive cache duration, then its checks.

Every step is idempotent: a second run changes no table (it checks what is there). Missed targets
are reported, not fatal: the main job shows the verdicts; the production DAGs fail on them.
:func:`run` returns what each step produced, so callers (and tests) read figures, not log lines.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import ConfigError, InputError, NothingToJudge
from outoforder.stages import registry
from outoforder.stages.context import StageContext
from outoforder.stages.join.spec import METHODS, JoinJob
from outoforder.stages.theta.spec import ThetaJob
from outoforder.stages.topk.spec import DEMO_JOB as TOPK_JOB

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from outoforder.stages.passes import PassStage
    from outoforder.stages.spec import Job

log = logging.getLogger(__name__)

STEPS = tuple(step.name for step in registry.steps())
"""The main job's steps in order; each folder declares its own (:mod:`~outoforder.stages.registry`)."""


@dataclass(frozen=True)
class MainRun:
    """What a step of the main job runs with: the context (its source is the replay), preset and run name."""

    ctx: StageContext
    preset: str
    run_name: str | None

    @property
    def spark(self) -> SparkSession:
        """The session."""
        return self.ctx.spark

    @property
    def settings(self) -> Settings:
        """The settings."""
        return self.ctx.settings

    @property
    def source(self) -> str:
        """The replay's source id."""
        return self.ctx.bronze_source

    def with_job(self, job: Job) -> StageContext:
        """The step's context for one of its jobs (the replay, the same session)."""
        return replace(self.ctx, job=job)


def run(
    ctx: StageContext,
    steps: Sequence[str] | None = None,
    preset: str | None = None,
    run_name: str | None = None,
) -> dict[str, Any]:
    """Run the chosen steps (all by default) in order; return each step's results by step name."""
    chosen = list(steps) if steps else list(STEPS)
    unknown = [s for s in chosen if s not in STEPS]
    if unknown:  # before Spark starts
        msg = f"unknown demo step {', '.join(unknown)} (steps: {', '.join(STEPS)})"
        raise ConfigError(msg)
    from outoforder.stages.ingest.replay import replay_source

    t0 = time.monotonic()
    settings = ctx.settings
    preset = preset or settings.demo.preset
    source = replay_source(preset, settings.demo.synthetic_seconds, settings.demo.seed)
    main = MainRun(StageContext(ctx.name, settings, source, session=ctx.spark), preset, run_name)
    results = {s.name: registry.load(s.run)(main) for s in registry.steps() if s.name in chosen}
    what = "done" if steps is None else f"{', '.join(chosen)} done"
    log.info(
        "[demo] %s in %.0f s; lake at %s; reports in %s",
        what, time.monotonic() - t0, settings.lake_root, settings.quality.reports_dir,
    )  # fmt: skip
    return results


def _announce(step: str, text: str) -> None:
    log.info("[demo] %d/%d %s", STEPS.index(step) + 1, len(STEPS), text)


def ingest(run: MainRun) -> list[Any]:
    """Step 1: the real datasets of the shared data folder into bronze."""
    spark, settings = run.spark, run.settings
    from outoforder.sources import catalog
    from outoforder.stages.ingest.files import ingest_files
    from outoforder.stages.ingest.plan import FileSpec

    missing = [
        str(d.path(settings.data_dir)) for d in catalog.BUILTIN if not d.path(settings.data_dir).exists()
    ]
    if missing:
        msg = (
            f"{len(missing)} of the shared datasets are missing (first: {missing[0]}); the main job "
            "expects the shared data folder at ../shared/data: set OOO_DATA_DIR to where it is"
        )
        raise InputError(msg)
    _announce("ingest", f"ingesting the real datasets from {settings.data_dir}")
    specs = [FileSpec(str(d.path(settings.data_dir)), d.reader, d.source) for d in catalog.BUILTIN]
    out = ingest_files(spark, settings, specs)
    for summary in out:
        log.info("%s", summary.line())
    return list(out)


def replay(run: MainRun) -> dict[str, Any]:
    """Step 2: synthetic play with the preset's injected disorder, ingested."""
    spark, settings, preset = run.spark, run.settings, run.preset
    from outoforder.stages.ingest.files import ingest_file
    from outoforder.stages.ingest.replay import format_report, make_replay

    seconds = settings.demo.synthetic_seconds
    _announce("replay", f"synthetic soccer play ({seconds:g} s) with the '{preset}' disorder preset")
    r = make_replay(settings.work_dir / "landing", preset, seconds, settings.demo.seed)
    log.info("%s", format_report(r.report))
    summary = ingest_file(spark, settings, r.path, "soccer_synthetic", r.source)
    log.info("%s", summary.line())
    return {"report": r.report, "ingest": summary}


def stats(run: MainRun) -> list[dict[str, Any]]:
    """Step 3: disorder statistics of every real dataset and the replay."""
    spark, settings, source = run.spark, run.settings, run.source
    from outoforder.sources import catalog
    from outoforder.stages.stats import format_table, source_stats

    _announce("stats", "disorder statistics (arrival order = arrival_seq)")
    results = [source_stats(spark, settings, s) for s in [*(d.source for d in catalog.BUILTIN), source]]
    out = settings.quality.reports_dir / "disorder_stats.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    log.info("%s", format_table(results))
    return results


def bronze(run: MainRun) -> list[Any]:
    """Step 4: Great Expectations over bronze."""
    spark, settings, run_name = run.spark, run.settings, run.run_name
    from outoforder.quality.bronze import validate_bronze

    _announce("bronze", "data quality of bronze (Great Expectations)")
    return list(validate_bronze(spark, settings, run_name=run_name))


def join(run: MainRun) -> dict[str, Any]:
    """Step 5: QJoin and the K-slack baselines side by side against the exact join."""
    settings, source, job = run.settings, run.source, JoinJob()
    from outoforder.stages.join.evaluate import format_summary, run_join_on_source, write_summary

    _announce(
        "join",
        f"stream join on {source}: ball vs players, w = {job.window_us / 1e6:g} s, theta = {job.theta:g} m, "
        f"Q_user = {job.q_user}, P = {job.period_us / 1e6:g} s, L = {job.interval_us / 1e6:g} s",
    )
    result = run_join_on_source(run.with_job(job), METHODS)
    log.info("%s", format_summary(result))
    out = write_summary(result, settings.quality.reports_dir / f"join_{source.replace('/', '_')}.json")
    log.info("[demo] join quality summary in %s", out)
    return result


def _stream_step(settings: Settings) -> int:
    return round(settings.demo.stream_interval_s * 1e6)


def _verdicts(check: Callable[[], list[Any]]) -> list[Any]:
    """A check's suites; none when nothing closed yet (a short replay): said, not counted as a pass."""
    try:
        return check()
    except NothingToJudge as e:
        log.warning("[demo] no verdict: %s", e)
        return []


def _passes(step: str, stage: PassStage[Any, Any], head: str) -> list[Any]:
    """Run a stream stage over the arrivals it has not processed: a pass per main-job step of arrivals.

    As the scheduler would, a run a step; the results are those of any other cadence.
    """
    span = stage.pending()
    if span is None:
        _announce(step, f"{head}: up to date; checking it")
        return []
    every = _stream_step(stage.settings)
    _announce(
        step,
        f"{head}: a pass every {every / 1e6:g} s of arrivals ({-(-(span[1] - span[0]) // every)} passes)",
    )
    done = []
    for end in range(span[0] + every, span[1] + every, every):
        summary = stage.run(span[0], min(end, span[1]), catch_up=True)
        if summary is not None:
            done.append(summary)
    return done


def stream_join(run: MainRun) -> dict[str, Any]:
    """Step 6: the production path -- a pass per run with state in Delta, adapting inside, GX checks."""
    source, job, run_name = run.source, JoinJob(), run.run_name
    from outoforder.stages.join.stream import JoinStream
    from outoforder.stages.join.validate import validate_join

    ctx = run.with_job(job)
    stage = JoinStream(ctx)
    head = (
        f"the stream join as the pipeline runs it (DAG join_stream): state in Delta, the retention adapted "
        f"every L = {job.interval_us / 1e6:g} s of stream progress inside the passes, then the recall and "
        "duplicate checks"
    )
    passes = _passes("stream-join", stage, head)
    pos = stage.position()
    if pos is None:
        msg = f"the stream join of {source} has no state to check"
        raise InputError(msg)
    # a missed target is reported here, not fatal: the demo shows the verdict; the DAG fails on it
    suites = _verdicts(lambda: validate_join(ctx, pos.as_of_us, fail=False, run_name=run_name))
    return {"intervals": passes, "suites": suites}


def aggregates(run: MainRun) -> dict[str, Any]:
    """Step 7: sliding-window SUMs with HPM over the same intervals, Γ-rule repairs, a final repair."""
    run_name = run.run_name
    from outoforder.stages.aggregate.repair import repair
    from outoforder.stages.aggregate.spec import AggJob
    from outoforder.stages.aggregate.stream import AggregateStream
    from outoforder.stages.aggregate.validate import validate_aggregate

    job = AggJob()
    head = (
        f"sliding-window {job.aggregate.upper()} of the sensor speeds with HPM (DAGs aggregate_stream + "
        f"late_repair): window {job.window_us / 1e6:g} s, slide {job.slide_us / 1e6:g} s, "
        f"(ε, δ) = ({job.eps}, {job.delta}), K from the {job.controller} controller, "
        f"Γ {job.gamma_us / 1e6:g} s"
    )
    ctx = run.with_job(job)
    intervals = _passes("aggregates", AggregateStream(ctx, repair_each=True), head)
    # the stream is over: repair what is still pending, so every window is exact
    final = repair(ctx, force=True)
    log.info("%s", final.line())
    suites = _verdicts(lambda: validate_aggregate(ctx, fail=False, run_name=run_name))
    return {"intervals": intervals, "final_repair": final, "suites": suites}


def theta(run: MainRun) -> dict[str, Any]:
    """Step 8: a θ-join backfill over the replay's whole event-time range, and its completeness check."""
    spark, settings, source, run_name = run.spark, run.settings, run.source, run.run_name
    from outoforder.stages.theta.backfill import event_range, run_interval
    from outoforder.stages.theta.validate import validate_theta

    job = ThetaJob()
    first, last = event_range(spark, settings, source)
    w = job.window_us
    start, end = first // w * w, (last // w + 1) * w
    _announce(
        "theta",
        f"θ-join backfill (DAG theta_backfill) with FastThetaJoin: ball.x within 1 cm of team_a.x "
        f"(|a - b| <= 0.01 m), {w / 1e6:g} s event-time windows, {job.partitions} partitions",
    )
    ctx = run.with_job(job)
    summary = run_interval(ctx, start, end)
    log.info("%s", summary.line())
    suites = validate_theta(ctx, start, end, sample=2, run_name=run_name)
    return {"backfill": summary, "suites": suites}


def topk(run: MainRun) -> dict[str, Any]:
    """Step 9: continuous top-k of the players' speeds with the adaptive cache duration."""
    run_name = run.run_name
    from outoforder.stages.topk.stream import TopKStream
    from outoforder.stages.topk.validate import validate_topk

    job = TOPK_JOB
    head = (
        f"continuous top-{job.k} of the players' speeds (DAG topk_stream): windows "
        f"{job.window_us / 1e6:g} s sliding by {job.slide_us / 1e6:g} s, cache K "
        f"{job.initial_cache_us / 1e6:g} s initially, adapted for ε_min {job.eps_min} (m {job.m}, n {job.n})"
    )
    ctx = run.with_job(job)
    intervals = _passes("topk", TopKStream(ctx), head)
    suites = _verdicts(lambda: validate_topk(ctx, fail=False, run_name=run_name))
    return {"intervals": intervals, "suites": suites}
