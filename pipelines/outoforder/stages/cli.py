"""Command line of the pipeline stages: ``python -m outoforder.stages <stage> [options]``.

Stages::

    ingest          read files into bronze (built-in datasets, or --file/--reader/--source)
    replay          generate synthetic soccer play with injected disorder and ingest it
    stats           disorder statistics per source from bronze (late fraction, mean/max delay)
    validate-bronze Great Expectations suites over bronze (fails on violation)
    join            QJoin and the K-slack baselines on a bronze source or a file, vs the truth
    join-stream     the stream join over arrival-time intervals, state kept in Delta (DAG join_stream)
    join-adapt      choose the retention in force from a time on, from the history (DAG join_adapt)
    join-repair     add the true pairs the stream join missed (join recall becomes exact)
    validate-join   recall per closed period and duplicate checks of the stream join (GX)
    aggregate-stream  sliding-window aggregates with HPM over arrival intervals (DAG aggregate_stream)
    aggregate-repair  recompute the windows of pending late tuples exactly, by the Γ rule (DAG late_repair)
    validate-aggregate  (ε, δ) at emission, exactness after repair, every window once (GX)
    theta-join      multi-way θ-join backfill of bronze windows (DAG theta_backfill), or of your own files
    validate-theta  completeness of a θ-join backfill against DuckDB on sampled windows (GX)
    topk-stream     continuous top-k with the adaptive cache duration over arrival intervals (DAG topk_stream)
    validate-topk   every window emitted once, accuracy of the closed windows >= ε_min (GX)
    demo            the main job: ingest, one injected preset, statistics, checks, join, aggregates, θ, top-k
    report          the data-quality report: static HTML, cumulative and per run (and to storage.publish_uri)
    landing         list the files waiting in the landing bucket (--json for the Airflow sensor)
    buckets         create object-store buckets (infra/minio.sh start runs it)
    publish         upload the reports and Data Docs to a bucket (--to s3a://bucket/prefix)
    checksum        rows and a content digest per table (compare two lakes, or before and after a rerun)
    maintain        OPTIMIZE and VACUUM every table (Delta's 7-day file retention; DAG maintenance)
    presets         list the disorder presets (or re-run their calibration)

Every stage prints progress and ends with a summary; errors of ours exit with status 2 and a
one-line reason, anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outoforder.config import Settings, load_settings
from outoforder.errors import ConfigError, InputError, OutOfOrderError, StateError
from outoforder.stages.join import METHODS as JOIN_METHODS
from outoforder.stages.join import JoinJob


def _spark(settings: Settings, name: str) -> Any:
    from outoforder.spark.session import get_spark

    t0 = time.monotonic()
    spark = get_spark(settings, app_name=f"outoforder-{name}")
    print(f"[spark] session up ({settings.spark.master}) in {time.monotonic() - t0:.1f} s", flush=True)
    return spark


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest built-in datasets and/or one user file."""
    from outoforder.sources import catalog
    from outoforder.stages.ingest import ingest_file

    if args.landing:
        from outoforder.stages.landing import ingest_landing

        outcomes = ingest_landing(_spark(settings, "ingest"), settings)
        rejected = sum(o.summary is None for o in outcomes)
        known = sum(o.summary is not None and o.summary.skipped for o in outcomes)
        print(
            f"[landing] {len(outcomes) - rejected - known} ingested, {known} already ingested "
            f"(same content), {rejected} rejected",
            flush=True,
        )
        return 0
    jobs: list[tuple[Path, str, str]] = []
    if args.file:
        if not (args.reader and args.source):
            print("ingest --file needs --reader and --source", file=sys.stderr)
            return 2
        jobs.append((Path(args.file), args.reader, args.source))
    if args.datasets or not args.file:
        # Airflow passes one templated string; accept commas and spaces alike.
        names = [n for item in args.datasets or [] for n in item.replace(",", " ").split()]
        for d in catalog.select(names or None):
            jobs.append((d.path(settings.data_dir), d.reader, d.source))
    spark = _spark(settings, "ingest")
    total_read = total_acc = total_q = 0
    for path, reader, source in jobs:
        s = ingest_file(spark, settings, path, reader, source)
        print(s.line(), flush=True)
        total_read += s.rows_read
        total_acc += s.accepted
        total_q += s.quarantined
    print(
        f"[ingest] {len(jobs)} files: {total_read:,} rows read = {total_acc:,} accepted + "
        f"{total_q:,} quarantined",
        flush=True,
    )
    return 0


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    """Generate, inject and ingest one replay."""
    from outoforder.stages.ingest import ingest_file
    from outoforder.stages.replay import format_report, make_replay

    landing = settings.work_dir / "landing"
    r = make_replay(landing, args.model, args.seconds, args.seed)
    print(format_report(r.report), flush=True)
    spark = _spark(settings, "replay")
    print(ingest_file(spark, settings, r.path, "soccer_synthetic", r.source).line(), flush=True)
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    """Disorder statistics from bronze."""
    from outoforder.stages.stats import all_sources, format_table, source_stats

    spark = _spark(settings, "stats")
    sources = args.source or all_sources(spark, settings)
    results = [source_stats(spark, settings, s) for s in sources]
    print(format_table(results, detail=args.detail), flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
        print(f"[stats] written to {args.json}")
    return 0


def _fail(args: argparse.Namespace) -> bool | None:
    """``--on-violation`` as the stages take it (None: the configured ``quality.on_violation``)."""
    return None if args.on_violation is None else args.on_violation == "fail"


def cmd_validate(args: argparse.Namespace, settings: Settings) -> int:
    """Great Expectations over bronze."""
    from outoforder.quality.bronze import validate_bronze

    spark = _spark(settings, "validate")
    validate_bronze(spark, settings, fail=False if args.warn_only else _fail(args), run_name=args.run_name)
    return 0


def _join_job(args: argparse.Namespace) -> JoinJob:
    return JoinJob(
        r_streams=tuple(args.r_streams.split(",")),
        s_streams=tuple(args.s_streams.split(",")),
        window_us=round(args.window_ms * 1000),
        theta=args.theta,
        predicate=args.predicate,
        q_user=args.q_user,
        period_us=round(args.period_s * 1e6),
        interval_us=round(args.interval_s * 1e6),
    )


def cmd_join(args: argparse.Namespace, settings: Settings) -> int:
    """Evaluate QJoin and the baselines on a bronze source or on a user's file."""
    from outoforder.stages.join import (
        evaluate,
        format_summary,
        input_from_frame,
        read_user_file,
        run_join_on_source,
        write_summary,
    )

    job = _join_job(args)
    methods = tuple(args.methods.split(","))
    if bool(args.source) == bool(args.file):
        print("join needs exactly one of --source and --file", file=sys.stderr)
        return 2
    if args.file:
        result = evaluate(input_from_frame(read_user_file(Path(args.file)), job), job, methods)
        name = Path(args.file).stem
    else:
        result = run_join_on_source(_spark(settings, "join"), settings, args.source, job, methods)
        name = args.source.replace("/", "_")
    print(format_summary(result), flush=True)
    out = Path(args.out) if args.out else settings.quality.reports_dir / f"join_{name}.json"
    print(f"[join] quality summary written to {write_summary(result, out)}", flush=True)
    return 0


def _instant(text: str) -> int:
    from outoforder.core.time import parse_instant_us

    try:
        return parse_instant_us(text)
    except ValueError as e:
        msg = f"not an instant (µs since the epoch or ISO 8601): {text!r}"
        raise ConfigError(msg) from e


def _steps(start: int, end: int, step: int) -> list[tuple[int, int]]:
    """[start, end) cut into intervals of ``step`` µs (the last one may be shorter)."""
    if step <= 0 or end <= start:
        msg = f"need start < end and a positive interval (got [{start}, {end}), step {step} µs)"
        raise ConfigError(msg)
    return [(lo, min(lo + step, end)) for lo in range(start, end, step)]


def _agg_job(args: argparse.Namespace) -> Any:
    from outoforder.stages.aggregate_stream import AggJob

    return AggJob.from_options(vars(args))


def _yes(text: str) -> bool:
    if text.lower() in ("true", "yes", "1", ""):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    msg = f"expected true or false, got {text!r}"
    raise argparse.ArgumentTypeError(msg)


def cmd_aggregate_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Run the HPM stream stage over [start, end) in steps of --every-s (and the Γ check after each)."""
    from outoforder.stages.aggregate_stream import pending_span, repair, run_interval

    spark = _spark(settings, "aggregate-stream")
    job = _agg_job(args)
    start = _instant(args.start) if args.start is not None else None
    end = _instant(args.end) if args.end is not None else None
    if start is None or end is None:
        span = pending_span(spark, settings, args.source, job)
        if span is None:
            print(
                f"[aggregate-stream] {args.source}: every arrival in bronze is processed already", flush=True
            )
            return 0
        start = span[0] if start is None else start
        end = span[1] if end is None else end
    step = round(args.every_s * 1e6) if args.every_s else end - start
    for lo, hi in _steps(start, end, step):
        print(run_interval(spark, settings, args.source, job, lo, hi).line(), flush=True)
        if args.repair:
            print(repair(spark, settings, args.source, job).line(), flush=True)
    return 0


def cmd_aggregate_repair(args: argparse.Namespace, settings: Settings) -> int:
    """One repair if the Γ rule (or --force) calls for it."""
    from outoforder.stages.aggregate_stream import repair

    summary = repair(_spark(settings, "aggregate-repair"), settings, args.source, _agg_job(args), args.force)
    print(summary.line(), flush=True)
    return 0


def cmd_validate_aggregate(args: argparse.Namespace, settings: Settings) -> int:
    """(ε, δ) at emission, exactness after repair, every window once (GX)."""
    from outoforder.stages.aggregate_stream import validate

    spark = _spark(settings, "validate-aggregate")
    validate(spark, settings, args.source, _agg_job(args), fail=_fail(args), run_name=args.run_name)
    return 0


def cmd_join_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Run the stream join over [start, end), in steps of --every (each step one interval)."""
    from outoforder.stages.join_stream import pending_span, run_with_adaptation

    spark = _spark(settings, "join-stream")
    job = _join_job(args)
    start = _instant(args.start) if args.start is not None else None
    end = _instant(args.end) if args.end is not None else None
    if start is None or end is None:
        span = pending_span(spark, settings, args.source, job, args.estimator)
        if span is None:
            print(f"[join-stream] {args.source}: every arrival in bronze is processed already", flush=True)
            return 0
        start = span[0] if start is None else start
        end = span[1] if end is None else end
    step = round(args.every_s * 1e6) if args.every_s else end - start
    every = round(args.adapt_every_s * 1e6) if args.adapt_every_s else 0
    run_with_adaptation(spark, settings, args.source, job, _steps(start, end, step), every, args.estimator)
    return 0


def cmd_join_adapt(args: argparse.Namespace, settings: Settings) -> int:
    """Choose the retention in force from --until on."""
    from outoforder.stages.join_stream import adapt

    adapt(
        _spark(settings, "join-adapt"),
        settings,
        args.source,
        _join_job(args),
        _instant(args.until),
        args.estimator,
    )
    return 0


def cmd_join_repair(args: argparse.Namespace, settings: Settings) -> int:
    """Add the true pairs the stream join missed before --until."""
    from outoforder.stages.join_stream import repair

    span = round(args.span_s * 1e6) if args.span_s else None
    spark = _spark(settings, "join-repair")
    repair(spark, settings, args.source, _join_job(args), _instant(args.until), args.estimator, span)
    return 0


def cmd_validate_join(args: argparse.Namespace, settings: Settings) -> int:
    """Recall per closed period and duplicate checks (GX)."""
    from outoforder.stages.join_stream import validate

    spark = _spark(settings, "validate-join")
    validate(
        spark, settings, args.source, _join_job(args), _instant(args.until), args.estimator,
        fail=_fail(args), run_name=args.run_name,
    )  # fmt: skip
    return 0


DEMO_STEPS = ("ingest", "replay", "stats", "bronze", "join", "stream-join", "aggregates", "theta", "topk")


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """The main job on the embedded default (every step, or those of ``--steps``)."""
    from outoforder.stages.replay import replay_source

    chosen = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else list(DEMO_STEPS)
    unknown = [s for s in chosen if s not in DEMO_STEPS]
    if unknown:
        msg = f"unknown demo step {', '.join(unknown)} (steps: {', '.join(DEMO_STEPS)})"
        raise ConfigError(msg)
    t0 = time.monotonic()
    spark = _spark(settings, "demo")
    preset = args.preset or settings.demo.preset
    source = replay_source(preset, settings.demo.synthetic_seconds, settings.demo.seed)
    run = args.run_name
    steps: dict[str, Callable[[], None]] = {
        "ingest": lambda: _demo_ingest(spark, settings),
        "replay": lambda: _demo_replay(spark, settings, preset),
        "stats": lambda: _demo_stats(spark, settings, source),
        "bronze": lambda: _demo_bronze(spark, settings, run),
        "join": lambda: _demo_join(spark, settings, source, JoinJob()),
        "stream-join": lambda: _demo_stream_join(spark, settings, source, JoinJob(), run),
        "aggregates": lambda: _demo_aggregates(spark, settings, source, run),
        "theta": lambda: _demo_theta(spark, settings, source, run),
        "topk": lambda: _demo_topk(spark, settings, source, run),
    }
    for step in DEMO_STEPS:
        if step in chosen:
            steps[step]()
    what = "done" if args.steps is None else f"{', '.join(chosen)} done"
    print(
        f"[demo] {what} in {time.monotonic() - t0:.0f} s; lake at {settings.lake_root}; reports in "
        f"{settings.quality.reports_dir}",
        flush=True,
    )
    return 0


def _demo_ingest(spark: Any, settings: Settings) -> None:
    """Step 1: the real datasets of the shared data folder into bronze."""
    from outoforder.sources import catalog
    from outoforder.stages.ingest import ingest_file

    missing = [
        str(d.path(settings.data_dir)) for d in catalog.BUILTIN if not d.path(settings.data_dir).exists()
    ]
    if missing:
        msg = (
            f"{len(missing)} of the shared datasets are missing (first: {missing[0]}); the main job "
            "expects the shared data folder at ../shared/data: set OOO_DATA_DIR to where it is"
        )
        raise InputError(msg)
    print(f"[demo] 1/9 ingesting the real datasets from {settings.data_dir}", flush=True)
    for d in catalog.BUILTIN:
        print(ingest_file(spark, settings, d.path(settings.data_dir), d.reader, d.source).line(), flush=True)


def _demo_replay(spark: Any, settings: Settings, preset: str) -> None:
    """Step 2: synthetic play with the preset's injected disorder, ingested."""
    from outoforder.stages.ingest import ingest_file
    from outoforder.stages.replay import format_report, make_replay

    print(
        f"[demo] 2/9 synthetic soccer play ({settings.demo.synthetic_seconds:g} s) with the "
        f"'{preset}' disorder preset",
        flush=True,
    )
    replay = make_replay(
        settings.work_dir / "landing", preset, settings.demo.synthetic_seconds, settings.demo.seed
    )
    print(format_report(replay.report), flush=True)
    print(ingest_file(spark, settings, replay.path, "soccer_synthetic", replay.source).line(), flush=True)


def _demo_stats(spark: Any, settings: Settings, source: str) -> None:
    """Step 3: disorder statistics of every real dataset and the replay."""
    from outoforder.sources import catalog
    from outoforder.stages.stats import format_table, source_stats

    print("[demo] 3/9 disorder statistics (arrival order = arrival_seq)", flush=True)
    results = [source_stats(spark, settings, s) for s in [*(d.source for d in catalog.BUILTIN), source]]
    out = settings.quality.reports_dir / "disorder_stats.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(format_table(results), flush=True)


def _demo_bronze(spark: Any, settings: Settings, run_name: str | None) -> None:
    """Step 4: Great Expectations over bronze."""
    from outoforder.quality.bronze import validate_bronze

    print("[demo] 4/9 data quality of bronze (Great Expectations)", flush=True)
    validate_bronze(spark, settings, run_name=run_name)


def _demo_join(spark: Any, settings: Settings, source: str, job: JoinJob) -> None:
    """Step 5: QJoin and the K-slack baselines side by side against the exact join."""
    from outoforder.stages.join import format_summary, run_join_on_source, write_summary

    print(
        f"[demo] 5/9 stream join on {source}: ball vs players, w = {job.window_us / 1e6:g} s, "
        f"theta = {job.theta:g} m, Q_user = {job.q_user}, P = {job.period_us / 1e6:g} s, "
        f"L = {job.interval_us / 1e6:g} s",
        flush=True,
    )
    result = run_join_on_source(spark, settings, source, job, JOIN_METHODS)
    print(format_summary(result), flush=True)
    out = write_summary(result, settings.quality.reports_dir / f"join_{source.replace('/', '_')}.json")
    print(f"[demo] join quality summary in {out}", flush=True)


def _demo_stream_join(
    spark: Any, settings: Settings, source: str, job: JoinJob, run_name: str | None
) -> None:
    """Step 6: the production path -- interval runs with state in Delta, adaptation, GX checks."""
    from outoforder.stages.join_stream import last_processed, pending_span, run_with_adaptation, validate

    span = pending_span(spark, settings, source, job)
    step = round(settings.demo.stream_interval_s * 1e6)
    if span is None:  # a second run of the main job: everything is joined already
        print(f"[demo] 6/9 the stream join of {source} is up to date; checking it", flush=True)
        done = last_processed(spark, settings, source, job)
        if done is None:
            msg = f"the stream join of {source} has no state to check"
            raise InputError(msg)
        validate(spark, settings, source, job, done, fail=False, run_name=run_name)
        return
    start, end = span
    print(
        f"[demo] 6/9 the stream join as the pipeline runs it (DAGs join_stream + join_adapt): "
        f"{-(-(end - start) // step)} arrival intervals of {step / 1e6:g} s, state in Delta, the "
        "retention adapted after each, then the recall and duplicate checks",
        flush=True,
    )
    run_with_adaptation(spark, settings, source, job, _steps(start, end, step), every_us=1)
    # a missed target is reported here, not fatal: the demo shows the verdict; the DAG fails on it
    validate(spark, settings, source, job, end, fail=False, run_name=run_name)


def _demo_aggregates(spark: Any, settings: Settings, source: str, run_name: str | None) -> None:
    """Step 7: sliding-window SUMs with HPM over the same intervals, Γ-rule repairs, a final repair."""
    from outoforder.stages.aggregate_stream import AggJob, pending_span, repair, run_interval, validate

    job = AggJob()
    span = pending_span(spark, settings, source, job)
    step = round(settings.demo.stream_interval_s * 1e6)
    head = (
        f"[demo] 7/9 sliding-window {job.aggregate.upper()} of the sensor speeds with HPM (DAGs "
        f"aggregate_stream + late_repair): window {job.size_us / 1e6:g} s, slide {job.slide_us / 1e6:g} s, "
        f"(ε, δ) = ({job.eps}, {job.delta}), K_p {job.k_p}, K_d {job.k_d}, Γ {job.gamma_us / 1e6:g} s"
    )
    if span is None:
        print(f"{head}: up to date; checking it", flush=True)
    else:
        print(f"{head}: {-(-(span[1] - span[0]) // step)} arrival intervals", flush=True)
        for lo, hi in _steps(span[0], span[1], step):
            print(run_interval(spark, settings, source, job, lo, hi).line(), flush=True)
            print(repair(spark, settings, source, job).line(), flush=True)
    # the stream is over: repair what is still pending, so every window is exact
    print(repair(spark, settings, source, job, force=True).line(), flush=True)
    validate(spark, settings, source, job, fail=False, run_name=run_name)


def _demo_theta(spark: Any, settings: Settings, source: str, run_name: str | None) -> None:
    """Step 8: a θ-join backfill over the replay's whole event-time range, and its completeness check."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE
    from outoforder.stages.theta_backfill import ThetaJob, run_interval, validate

    # positions, not speeds: the replay's ball speed takes a handful of values (mostly 0)
    job = ThetaJob(
        streams=("ball", "team_a"), column="x", predicates=("band:0.01",), window_us=10_000_000, partitions=16
    )
    row = (
        delta.read(spark, BRONZE, settings.lake_root)
        .where(F.col("source") == source)
        .agg(F.min("event_ts"), F.max("event_ts"))
        .first()
    )
    if row is None or row[0] is None:
        msg = f"no tuples of {source} in bronze"
        raise StateError(msg)
    lo, hi = int(row[0]), int(row[1])
    start, end = lo // job.window_us * job.window_us, (hi // job.window_us + 1) * job.window_us
    print(
        f"[demo] 8/9 θ-join backfill (DAG theta_backfill) with FastThetaJoin: ball.x within 1 cm of "
        f"team_a.x (|a - b| <= 0.01 m), {job.window_us / 1e6:g} s event-time windows, "
        f"{job.partitions} partitions",
        flush=True,
    )
    print(run_interval(spark, settings, source, job, start, end).line(), flush=True)
    validate(spark, settings, source, job, start, end, sample=2, run_name=run_name)


def _demo_topk(spark: Any, settings: Settings, source: str, run_name: str | None) -> None:
    """Step 9: continuous top-k of the players' speeds with the adaptive cache duration."""
    from outoforder.stages.topk_stream import TopKJob, pending_span, run_interval, validate

    # the seed's query scaled to a 20 s replay (60 s windows would never close); as the DAG's defaults
    job = TopKJob(
        streams=("team_a", "team_b"), window_us=4_000_000, slide_us=500_000, n=10, horizon_us=2_000_000
    )
    span = pending_span(spark, settings, source, job)
    step = round(settings.demo.stream_interval_s * 1e6)
    head = (
        f"[demo] 9/9 continuous top-{job.k} of the players' speeds (DAG topk_stream): windows "
        f"{job.window_us / 1e6:g} s sliding by {job.slide_us / 1e6:g} s, cache K {job.initial_us / 1e6:g} s "
        f"initially, adapted for ε_min {job.eps_min} (m {job.m}, n {job.n})"
    )
    if span is None:
        print(f"{head}: up to date; checking it", flush=True)
    else:
        print(f"{head}: {-(-(span[1] - span[0]) // step)} arrival intervals", flush=True)
        for lo, hi in _steps(span[0], span[1], step):
            print(run_interval(spark, settings, source, job, lo, hi).line(), flush=True)
    validate(spark, settings, source, job, fail=False, run_name=run_name)


def _theta_job(args: argparse.Namespace) -> Any:
    from outoforder.stages.theta_backfill import ThetaJob

    return ThetaJob(
        streams=tuple(x for x in args.streams.split(",") if x),
        column=args.column,
        predicates=tuple(x.strip() for x in args.predicates.split(",") if x.strip()),
        window_us=round(args.window_s * 1e6),
        method=args.method,
        partitions=args.partitions,
        prefilter=args.prefilter,
    )


def cmd_theta_join(args: argparse.Namespace, settings: Settings) -> int:
    """θ-join bronze windows over [start, end) (a backfill interval), or the user's files."""
    from outoforder.stages.theta_backfill import read_user_frames, run_interval

    if bool(args.file) == bool(args.source):
        msg = "theta-join needs exactly one of --source (bronze) and --file (two or more files)"
        raise ConfigError(msg)
    if args.source:
        if args.start is None or args.end is None:
            msg = "a bronze θ-join backfill needs --start and --end (event time)"
            raise ConfigError(msg)
        job = _theta_job(args)
        spark = _spark(settings, "theta-join")
        print(
            run_interval(spark, settings, args.source, job, _instant(args.start), _instant(args.end)).line()
        )
        return 0
    return _theta_files(args, settings, read_user_frames)


def _theta_files(args: argparse.Namespace, settings: Settings, read: Any) -> int:
    import time

    from pyspark.sql import functions as F

    from outoforder.core.theta.plan import Theta
    from outoforder.spark.theta import multiway_join

    paths = [Path(f) for f in args.file]
    thetas = [Theta.parse(x.strip()) for x in args.predicates.split(",") if x.strip()]
    if len(paths) < 2 or len(thetas) != len(paths) - 1:
        msg = f"{len(paths)} files need at least two files and {len(paths) - 1} predicates, got {len(thetas)}"
        raise ConfigError(msg)
    spark = _spark(settings, "theta-join")
    frames = read(spark, paths, args.column)
    nulls = [f.where(F.col(f"s{i}_v").isNull() | F.isnan(f"s{i}_v")).count() for i, f in enumerate(frames)]
    t0 = time.monotonic()
    res = multiway_join(frames, [f"s{i}_v" for i in range(len(paths))], thetas, args.method, args.partitions)
    try:
        rows = res.rows.select(
            *[F.col(f"s{i}_seq").alias(f"{p.stem}_row") for i, p in enumerate(paths)],
            *[F.col(f"s{i}_v").alias(f"{p.stem}_{args.column}") for i, p in enumerate(paths)],
        )
        if args.out:
            rows.write.mode("overwrite").parquet(args.out)
            n = spark.read.parquet(args.out).count()
            where = f", written to {args.out} (Parquet)"
        else:
            n, where = rows.count(), ""
    finally:
        res.release()
    for p, z in zip(paths, nulls, strict=True):
        if z:
            print(f"[theta] {p.name}: {z} rows with a null, NaN or non-numeric {args.column} excluded")
    print(f"[theta] {n} result rows in {time.monotonic() - t0:.1f} s ({args.method}){where}", flush=True)
    return 0


def cmd_validate_theta(args: argparse.Namespace, settings: Settings) -> int:
    """GX completeness of a θ-join backfill interval (sampled windows against DuckDB)."""
    from outoforder.stages.theta_backfill import validate

    spark = _spark(settings, "validate-theta")
    validate(
        spark, settings, args.source, _theta_job(args), _instant(args.start), _instant(args.end),
        sample=args.sample, fail=_fail(args), run_name=args.run_name,
    )  # fmt: skip
    return 0


def _topk_job(args: argparse.Namespace) -> Any:
    from outoforder.stages.topk_stream import TopKJob

    return TopKJob(
        streams=tuple(x.strip() for x in args.streams.split(",") if x.strip()),
        score=args.score,
        k=args.k,
        window_us=round(args.window_s * 1e6),
        slide_us=round(args.slide_s * 1e6),
        eps_min=args.eps_min,
        initial_us=round(args.cache_s * 1e6),
        m=args.m,
        n=args.n,
        horizon_us=round(args.horizon_s * 1e6),
        fixed_cache_us=None if args.fixed_cache_s is None else round(args.fixed_cache_s * 1e6),
    )


def cmd_topk_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Run the top-k stream stage over [start, end) in steps of --every-s."""
    from outoforder.stages.topk_stream import pending_span, run_interval

    spark = _spark(settings, "topk-stream")
    job = _topk_job(args)
    start = _instant(args.start) if args.start is not None else None
    end = _instant(args.end) if args.end is not None else None
    if start is None or end is None:
        span = pending_span(spark, settings, args.source, job)
        if span is None:
            print(f"[topk-stream] {args.source}: every arrival in bronze is processed already", flush=True)
            return 0
        start = span[0] if start is None else start
        end = span[1] if end is None else end
    step = round(args.every_s * 1e6) if args.every_s else end - start
    for lo, hi in _steps(start, end, step):
        print(run_interval(spark, settings, args.source, job, lo, hi).line(), flush=True)
    return 0


def cmd_validate_topk(args: argparse.Namespace, settings: Settings) -> int:
    """Every window once, accuracy of the closed windows (GX)."""
    from outoforder.stages.topk_stream import validate

    spark = _spark(settings, "validate-topk")
    validate(spark, settings, args.source, _topk_job(args), fail=_fail(args), run_name=args.run_name)
    return 0


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    """The data-quality report: the cumulative page, and a run's page given --run-name."""
    from outoforder.quality.report import LakeTables, build_reports, headline_text

    start = _instant(args.start) if args.start is not None else None
    end = _instant(args.end) if args.end is not None else None
    spark = _spark(settings, "report")
    tables = LakeTables(spark, settings)
    for path in build_reports(spark, settings, args.run_name, start, end, tables=tables):
        print(f"[report] written {path}", flush=True)
    if args.headline:
        print(headline_text(tables), flush=True)
    if settings.storage.publish_uri:
        _publish(settings, settings.storage.publish_uri)
    return 0


def _publish(settings: Settings, uri: str) -> None:
    from outoforder.io import objectstore

    q = settings.quality
    n = objectstore.publish(settings.storage, q.reports_dir, uri)
    if q.docs_dir.is_dir() and not q.docs_dir.is_relative_to(q.reports_dir):
        n += objectstore.publish(settings.storage, q.docs_dir, f"{uri.rstrip('/')}/data_docs")
    print(f"[publish] {n} files uploaded to {uri}", flush=True)


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    """Upload the reports folder (and Data Docs) to a bucket."""
    uri = args.to or settings.storage.publish_uri
    if not uri:
        print("publish needs --to s3a://bucket/prefix (or storage.publish_uri)", file=sys.stderr)
        return 2
    _publish(settings, uri)
    return 0


def cmd_checksum(args: argparse.Namespace, settings: Settings) -> int:
    """Rows and a content digest of every table (see :func:`outoforder.io.delta.content_digest`)."""
    from outoforder.io import delta
    from outoforder.io.tables import ALL_TABLES

    spark = _spark(settings, "checksum")
    names = set(args.tables or [t.name for t in ALL_TABLES])
    digests = delta.content_digests(spark, settings.lake_root, [t for t in ALL_TABLES if t.name in names])
    if args.json:
        print("CHECKSUMS" + json.dumps(digests, sort_keys=True), flush=True)
    else:
        for name, d in digests.items():
            print(f"{name:<24} {d['rows']:>12,} rows  {d['digest']}")
    return 0


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    """Compact and vacuum the tables (all, or --tables), one at a time, retrying on conflicts."""
    from outoforder.io import delta
    from outoforder.io.conflicts import retry_on_conflict
    from outoforder.io.tables import ALL_TABLES

    names = set(args.tables or [t.name for t in ALL_TABLES])
    unknown = sorted(names - {t.name for t in ALL_TABLES})
    if unknown:
        msg = f"unknown table {', '.join(unknown)}"
        raise ConfigError(msg)
    spark = _spark(settings, "maintain")
    run = retry_on_conflict(delta.maintain)
    chosen = [t for t in ALL_TABLES if t.name in names]
    for i, t in enumerate(chosen, 1):
        t0 = time.monotonic()
        r = run(spark, t, settings.lake_root, not args.no_optimize)
        print(
            f"[maintain] {i}/{len(chosen)} {t.name}: {r['files_before']:,} files -> {r['files_after']:,}, "
            f"{r['vacuumed']:,} files unused for the retention period deleted "
            f"({time.monotonic() - t0:.1f} s)",
            flush=True,
        )
    return 0


def cmd_landing(args: argparse.Namespace, settings: Settings) -> int:
    """List the landing zone's waiting files."""
    from outoforder.io import objectstore

    items = objectstore.pending(settings.storage)
    if args.json:
        print(json.dumps([{"uri": i.uri, "size": i.size} for i in items]))
    else:
        for i in items:
            print(f"{i.uri}\t{i.size:,} bytes")
        print(f"[landing] {len(items)} files waiting under {settings.storage.landing_uri}/incoming/")
    return 0


def cmd_buckets(args: argparse.Namespace, settings: Settings) -> int:
    """Create buckets that do not exist yet."""
    from outoforder.io import objectstore

    created = objectstore.ensure_buckets(settings.storage, args.names)
    print(f"[buckets] {', '.join(args.names)} ready ({', '.join(created) or 'none'} created)", flush=True)
    return 0


def cmd_presets(args: argparse.Namespace, settings: Settings) -> int:
    """List presets; ``--calibrate`` re-derives the DEBS presets' body parameters."""
    from outoforder.sources.disorder import _BODIES, PRESETS, calibrate_body

    for p in PRESETS.values():
        t = p.target
        line = f"{p.name:<12} {p.description:<40} {p.model.describe()}"
        if t is not None:
            line += (
                f"\n{'':<12} target: late {100 * t.late_frac:.2f}%, mean {1000 * t.mean_delay_late_s:.1f} ms,"
                f" max {t.max_delay_s:.1f} s over {t.tuples:,} tuples at {t.rate_per_s:,.0f}/s"
            )
        print(line)
        if args.calibrate and p.name in _BODIES and t is not None:
            print(f"{'':<12} calibrated body (mu, sigma, delayed share): {calibrate_body(t)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all stages."""
    p = argparse.ArgumentParser(
        prog="python -m outoforder.stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="a TOML file overriding include/config/outoforder.toml")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="as the global --config")
    sub = p.add_subparsers(dest="stage", required=True)
    i = sub.add_parser("ingest", parents=[common], help="read files into bronze")
    i.add_argument("--datasets", nargs="*", help="built-in dataset ids or prefixes (default: all)")
    i.add_argument("--file", help="a file of your own (plain or gzip)")
    i.add_argument("--reader", help="its format: debs2013, soccer_synthetic, ooo, debs2015")
    i.add_argument("--source", help="the source id to store it under, e.g. debs2013/full-game")
    i.add_argument("--landing", action="store_true", help="ingest the files waiting in the landing bucket")
    i.set_defaults(func=cmd_ingest)
    r = sub.add_parser(
        "replay", parents=[common], help="synthetic soccer play with injected disorder, ingested"
    )
    r.add_argument("--model", default="hpm_game1", help="a preset or family:key=value,...")
    r.add_argument("--seconds", type=float, default=20.0)
    r.add_argument("--seed", type=int, default=7)
    r.set_defaults(func=cmd_replay)
    s = sub.add_parser("stats", parents=[common], help="disorder statistics per source")
    s.add_argument("--source", nargs="*", help="source ids (default: all in bronze)")
    s.add_argument("--detail", action="store_true", help="also print per stream and per key")
    s.add_argument("--json", help="also write the full figures (per stream, per key) here")
    s.set_defaults(func=cmd_stats)
    checks = argparse.ArgumentParser(add_help=False)
    checks.add_argument(
        "--on-violation",
        choices=["fail", "warn"],
        help="a violated target fails the command, or is only reported (default: quality.on_violation)",
    )
    checks.add_argument("--run-name", help="names this validation in Data Docs and the quality report")
    v = sub.add_parser("validate-bronze", parents=[common, checks], help="Great Expectations over bronze")
    v.add_argument("--warn-only", action="store_true", help="the same as --on-violation warn")
    v.set_defaults(func=cmd_validate)
    d = sub.add_parser("demo", parents=[common], help="the main job")
    d.add_argument("--preset", help="disorder preset for the synthetic replay")
    d.add_argument("--steps", help=f"only these steps, comma-separated ({', '.join(DEMO_STEPS)})")
    d.add_argument("--run-name", help="names the steps' validations (Data Docs, the quality report)")
    d.set_defaults(func=cmd_demo)
    query = argparse.ArgumentParser(add_help=False)
    query.add_argument("--r-streams", default="ball", help="streams forming R (comma-separated)")
    query.add_argument("--s-streams", default="team_a,team_b", help="streams forming S")
    query.add_argument("--window-ms", type=float, default=500.0, help="w: |r.ts - s.ts| <= w")
    query.add_argument("--theta", type=float, default=2.0, help="distance threshold (metres)")
    query.add_argument("--predicate", choices=["distance", "key"], default="distance")
    query.add_argument("--q-user", type=float, default=0.95, help="recall target per period")
    query.add_argument("--period-s", type=float, default=5.0, help="P")
    query.add_argument("--interval-s", type=float, default=0.5, help="L, the adaptation interval")
    j = sub.add_parser("join", parents=[common, query], help="evaluate QJoin and the K-slack baselines")
    j.add_argument("--source", help="a bronze source id (e.g. synthetic/hpm_game1-20s-seed7)")
    j.add_argument("--file", help="or a CSV/Parquet file: stream|side, event_ts|ts (µs), x, y, key")
    j.add_argument("--methods", default=",".join(JOIN_METHODS), help="comma-separated subset")
    j.add_argument("--out", help="where to write the JSON summary")
    j.set_defaults(func=cmd_join)
    stream = argparse.ArgumentParser(add_help=False)
    stream.add_argument("--source", required=True, help="the bronze source id")
    stream.add_argument("--estimator", choices=["learned", "paper"], default="learned")
    js = sub.add_parser("join-stream", parents=[common, query, stream], help="the stream join over intervals")
    js.add_argument(
        "--start", help="arrival-time interval start (µs or ISO 8601; default: where the job stopped)"
    )
    js.add_argument("--end", help="interval end, exclusive (default: after the newest arrival in bronze)")
    js.add_argument("--every-s", type=float, help="split [start, end) into intervals of this many seconds")
    js.add_argument(
        "--adapt-every-s",
        type=float,
        help="also adapt the retention every this many seconds (counted from the job's first interval)",
    )
    js.set_defaults(func=cmd_join_stream)
    ja = sub.add_parser(
        "join-adapt", parents=[common, query, stream], help="adapt the stream join's retention"
    )
    ja.add_argument("--until", required=True, help="history before this arrival time; in force from it")
    ja.set_defaults(func=cmd_join_adapt)
    jr = sub.add_parser(
        "join-repair", parents=[common, query, stream], help="add the pairs the stream missed"
    )
    jr.add_argument("--until", required=True, help="repair the history before this arrival time")
    jr.add_argument("--span-s", type=float, help="only the last this many seconds of arrivals (default: all)")
    jr.set_defaults(func=cmd_join_repair)
    vj = sub.add_parser(
        "validate-join", parents=[common, query, stream, checks], help="GX checks of the stream join"
    )
    vj.add_argument("--until", required=True, help="check the history before this arrival time")
    vj.set_defaults(func=cmd_validate_join)
    agg = argparse.ArgumentParser(add_help=False)
    agg.add_argument("--source", required=True, help="the bronze source id")
    agg.add_argument("--streams", default="", help="streams to aggregate (comma-separated; default: all)")
    agg.add_argument("--aggregate", default="sum", help="sum, count, avg, min, max, median or quantile:q")
    agg.add_argument("--window-ms", type=float, default=500.0, help="window size")
    agg.add_argument("--slide-ms", type=float, default=100.0, help="window slide")
    agg.add_argument("--eps", type=float, default=0.05, help="ε: the error bound")
    agg.add_argument("--delta", type=float, default=0.05, help="δ: the share of windows allowed to miss ε")
    agg.add_argument("--kp", type=float, default=0.2, help="PD controller K_p")
    agg.add_argument("--kd", type=float, default=4.0, help="PD controller K_d")
    agg.add_argument("--alpha0", type=float, default=0.6, help="initial α (K = α · max delay)")
    agg.add_argument("--alpha-min", type=float, default=0.05, help="the floor of α (0 = the paper's)")
    agg.add_argument(
        "--horizon-ms", type=float, default=1000.0, help="coverage observed this long after a close"
    )
    agg.add_argument(
        "--gamma-s", type=float, default=5.0, help="Γ: repair when pending late tuples span more"
    )
    ags = sub.add_parser("aggregate-stream", parents=[common, agg], help="HPM aggregates over intervals")
    ags.add_argument(
        "--start", help="arrival-time interval start (µs or ISO 8601; default: where the job stopped)"
    )
    ags.add_argument("--end", help="interval end, exclusive (default: after the newest arrival in bronze)")
    ags.add_argument("--every-s", type=float, help="split [start, end) into intervals of this many seconds")
    ags.add_argument(
        "--repair", action="store_true", help="check the Γ rule (and repair) after each interval"
    )
    ags.set_defaults(func=cmd_aggregate_stream)
    agr = sub.add_parser("aggregate-repair", parents=[common, agg], help="repair late tuples by the Γ rule")
    agr.add_argument(
        "--force",
        type=_yes,
        nargs="?",
        const=True,
        default=False,
        help="repair whatever is pending, Γ or not",
    )
    agr.set_defaults(func=cmd_aggregate_repair)
    agv = sub.add_parser(
        "validate-aggregate", parents=[common, agg, checks], help="GX checks of the aggregates"
    )
    agv.set_defaults(func=cmd_validate_aggregate)
    th = argparse.ArgumentParser(add_help=False)
    th.add_argument("--streams", default="ball,team_a", help="streams S0,S1,… of the source (in chain order)")
    th.add_argument("--column", default="value", help="the join column: value, x, y, z or event_ts")
    th.add_argument("--predicates", default="<", help="θ0,θ1,… between neighbours: <, <=, >=, >, = or band:c")
    th.add_argument("--window-s", type=float, default=1.0, help="tumbling event-time window")
    th.add_argument("--method", default="fast", help="fast, cfs, one-bucket, spark-sql or cross")
    th.add_argument("--partitions", type=int, default=8, help="FastThetaJoin's range partitions")
    th.add_argument(
        "--prefilter",
        choices=["none", "mcf", "semi"],
        default="none",
        help="equi-joins: drop rows whose key another stream lacks first (MCF cuckoo filters, or exact)",
    )
    tj = sub.add_parser("theta-join", parents=[common, th], help="multi-way θ-join backfill or files")
    tj.add_argument("--source", help="the bronze source id")
    tj.add_argument("--start", help="event-time interval start (µs or ISO 8601), a window multiple")
    tj.add_argument("--end", help="interval end, exclusive")
    tj.add_argument("--file", action="append", help="a stream of your own (CSV or Parquet); give two or more")
    tj.add_argument("--out", help="with --file: write the result rows here (Parquet)")
    tj.set_defaults(func=cmd_theta_join)
    tv = sub.add_parser(
        "validate-theta", parents=[common, th, checks], help="GX completeness of a θ backfill"
    )
    tv.add_argument("--source", required=True, help="the bronze source id")
    tv.add_argument("--start", required=True, help="event-time interval start")
    tv.add_argument("--end", required=True, help="interval end, exclusive")
    tv.add_argument("--sample", type=int, default=3, help="windows checked against DuckDB")
    tv.set_defaults(func=cmd_validate_theta)
    tk = argparse.ArgumentParser(add_help=False)
    tk.add_argument("--source", required=True, help="the bronze source id")
    tk.add_argument("--streams", default="", help="streams to rank (comma-separated; default: all)")
    tk.add_argument("--score", default="value", help="the score column: value, x, y or z")
    tk.add_argument("--k", type=int, default=5, help="results per window")
    tk.add_argument("--window-s", type=float, default=60.0, help="window size")
    tk.add_argument("--slide-s", type=float, default=5.0, help="window slide")
    tk.add_argument("--eps-min", type=float, default=0.95, help="ε_min: the lowest acceptable accuracy")
    tk.add_argument("--cache-s", type=float, default=2.0, help="the initial cache duration K")
    tk.add_argument("--m", type=int, default=10, help="candidate durations")
    tk.add_argument("--n", type=int, default=30, help="queries per decision")
    tk.add_argument("--horizon-s", type=float, default=10.0, help="late tuples awaited this long for scoring")
    tk.add_argument("--fixed-cache-s", type=float, help="a fixed K instead of the adaptive duration")
    tks = sub.add_parser("topk-stream", parents=[common, tk], help="continuous top-k over arrival intervals")
    tks.add_argument(
        "--start", help="arrival-time interval start (µs or ISO 8601; default: where the job stopped)"
    )
    tks.add_argument("--end", help="interval end, exclusive (default: after the newest arrival in bronze)")
    tks.add_argument("--every-s", type=float, help="split [start, end) into intervals of this many seconds")
    tks.set_defaults(func=cmd_topk_stream)
    tkv = sub.add_parser("validate-topk", parents=[common, tk, checks], help="GX checks of the top-k stream")
    tkv.set_defaults(func=cmd_validate_topk)
    rp = sub.add_parser("report", parents=[common], help="the data-quality report (static HTML)")
    rp.add_argument("--run-name", help="also write this run's page (its validations and interval)")
    rp.add_argument("--start", help="the run's arrival-time interval start (µs or ISO 8601)")
    rp.add_argument("--end", help="the run's interval end, exclusive")
    rp.add_argument("--headline", action="store_true", help="also print the targets and baselines tables")
    rp.set_defaults(func=cmd_report)
    la = sub.add_parser("landing", parents=[common], help="files waiting in the landing bucket")
    la.add_argument("--json", action="store_true", help="one JSON list (the Airflow sensor reads it)")
    la.set_defaults(func=cmd_landing)
    bu = sub.add_parser("buckets", parents=[common], help="create object-store buckets")
    bu.add_argument("names", nargs="+")
    bu.set_defaults(func=cmd_buckets)
    ck = sub.add_parser("checksum", parents=[common], help="rows and a content digest per table")
    ck.add_argument("--tables", nargs="*", help="table names, e.g. gold/join_results (default: all)")
    ck.add_argument("--json", action="store_true", help="one line: CHECKSUMS{...}")
    ck.set_defaults(func=cmd_checksum)
    mt = sub.add_parser("maintain", parents=[common], help="OPTIMIZE and VACUUM the tables")
    mt.add_argument("--tables", nargs="*", help="table names (default: all)")
    mt.add_argument("--no-optimize", action="store_true", help="only VACUUM")
    mt.set_defaults(func=cmd_maintain)
    pu = sub.add_parser("publish", parents=[common], help="upload the reports and Data Docs to a bucket")
    pu.add_argument("--to", help="s3a://bucket/prefix (default: storage.publish_uri)")
    pu.set_defaults(func=cmd_publish)
    pr = sub.add_parser("presets", parents=[common], help="list disorder presets")
    pr.add_argument("--calibrate", action="store_true", help="re-run the calibration (slow)")
    pr.set_defaults(func=cmd_presets)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.config)
        return int(args.func(args, settings))
    except OutOfOrderError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
