"""Command line of the pipeline stages: ``python -m outoforder.stages <stage> [options]``.

Stages::

    ingest          read files into bronze (built-in datasets, or --file/--reader/--source)
    ingest-kafka    a declared Kafka source: the records that arrived since the last run (DAG ingest_kafka)
    produce         replay a bronze source into a Kafka topic at a chosen speed (demos, benchmarks)
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

Every stage logs its progress and ends with a summary (``--quiet``: warnings and errors only);
errors of ours exit with status 2 and a one-line reason, anything else is a bug and shows its
traceback. The job options of each stage are generated from the job declarations
(:mod:`outoforder.stages.spec`); this module imports nothing heavy until a stage runs, so
``--help`` is instant and the parser can be checked against the DAGs in the Airflow venv.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from outoforder.config import Settings, load_settings
from outoforder.errors import EXIT_ERROR, EXIT_QUALITY, ConfigError, InputError, OutOfOrderError, QualityError
from outoforder.stages import spec
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.demo import STEPS as DEMO_STEPS
from outoforder.stages.join.spec import METHODS as JOIN_METHODS
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.theta.spec import ThetaJob
from outoforder.stages.topk.spec import TopKJob

log = logging.getLogger("outoforder.stages")

# which job each stage takes (its options are generated from the job's declaration)
STAGE_JOBS: dict[str, type[spec.Job]] = {
    **dict.fromkeys(("join", "join-stream", "join-adapt", "join-repair", "validate-join"), JoinJob),
    **dict.fromkeys(("aggregate-stream", "aggregate-repair", "validate-aggregate"), AggJob),
    **dict.fromkeys(("theta-join", "validate-theta"), ThetaJob),
    **dict.fromkeys(("topk-stream", "validate-topk"), TopKJob),
}


class _Stdout(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stdout`` is at the time (tests and Airflow capture it)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    @property
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def configure_logging(quiet: bool = False) -> None:
    """Progress lines (the package's INFO records) to stdout, one per line; ``quiet``: warnings only."""
    root = logging.getLogger("outoforder")
    for h in [h for h in root.handlers if isinstance(h, _Stdout)]:
        root.removeHandler(h)
    handler = _Stdout()
    handler.setFormatter(logging.Formatter("%(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING if quiet else logging.INFO)
    root.propagate = False  # one copy of each line, whatever the host process configured


_owned: list[Any] = []  # Spark Connect sessions this run opened: released when it ends


def _spark(settings: Settings, name: str) -> Any:
    from pyspark.sql import SparkSession

    from outoforder.spark.session import get_spark, is_remote, master

    t0 = time.monotonic()
    before = SparkSession.getActiveSession()
    spark = get_spark(settings, app_name=f"outoforder-{name}")
    remote = is_remote(spark)
    if remote and before is None:
        _owned.append(spark)
        spark.addTag(f"outoforder-{name}")  # names this stage's jobs on the shared server
        signal.signal(signal.SIGTERM, _interrupted)
    if before is None:  # a session of its own: the stage's own settings (a shared one keeps its owner's)
        for key, value in settings.spark.stage_conf.get(name, {}).items():
            spark.conf.set(key, value)
    kind = f"Spark Connect {settings.spark.remote}" if remote else "in-process"
    # the master the application really runs on (the server's, or under spark-submit the connection's)
    log.info("[spark] session up (%s, %s) in %.1f s", kind, master(spark), time.monotonic() - t0)
    return spark


def _instant(text: str | None) -> int | None:
    """µs since the epoch, or ISO 8601, as µs (None stays None)."""
    from outoforder.core.time import parse_instant_us

    if text is None:
        return None
    try:
        return parse_instant_us(text)
    except ValueError as e:
        msg = f"not an instant (µs since the epoch or ISO 8601): {text!r}"
        raise ConfigError(msg) from e


def _required_instant(text: str) -> int:
    value = _instant(text)
    if value is None:  # argparse marks these options required; this guards direct callers
        msg = "an instant is required"
        raise ConfigError(msg)
    return value


def _us(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1e6)


def _fail(args: argparse.Namespace) -> bool | None:
    """``--on-violation`` as the stages take it (None: the configured ``quality.on_violation``)."""
    return None if args.on_violation is None else args.on_violation == "fail"


MAX_SECONDS = 1e9  # about 32 years: beyond it a duration is a typo, and µs would pass int64 soon after


def _number(text: str, *, zero: bool, unit: str = "", upper: float = math.inf) -> float:
    """A finite number > 0 (>= 0 where ``zero`` has a meaning) and at most ``upper``, or a usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0)) and value <= upper):
        bounds = (">= 0" if zero else "> 0") + (f" and at most {upper:g}" if math.isfinite(upper) else "")
        msg = f"takes a finite number{unit} {bounds}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _seconds(text: str) -> float:
    """A duration flag in seconds, > 0."""
    return _number(text, zero=False, unit=" of seconds", upper=MAX_SECONDS)


def _seconds_or_zero(text: str) -> float:
    """A duration flag in seconds where 0 means something (never, as fast as possible)."""
    return _number(text, zero=True, unit=" of seconds", upper=MAX_SECONDS)


def _positive(text: str) -> float:
    """A finite number > 0 (a rate)."""
    return _number(text, zero=False)


def _non_negative(text: str) -> float:
    """A finite number >= 0 (a speed-up, 0: as fast as possible)."""
    return _number(text, zero=True)


def _yes(text: str) -> bool:
    if text.lower() in ("true", "yes", "1", ""):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    msg = f"expected true or false, got {text!r}"
    raise argparse.ArgumentTypeError(msg)


# --- ingest, replay, stats, bronze ------------------------------------------------------------


def expand_files(paths: list[str]) -> list[Path]:
    """Files as given, a folder's files by name (the order they continue the stream in), nothing twice.

    >>> expand_files([])
    []
    """
    out: list[Path] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if not found:
                msg = f"ingest --file {given}: the folder holds no files"
                raise InputError(msg)
            out += found
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest built-in datasets and/or one user file, or the landing bucket."""
    from outoforder.sources import catalog
    from outoforder.stages.ingest.files import FileSpec, ingest_files

    if args.landing:
        from outoforder.stages.ingest.landing import ingest_landing

        outcomes = ingest_landing(_spark(settings, "ingest"), settings)
        rejected = sum(o.summary is None for o in outcomes)
        known = sum(o.summary is not None and o.summary.skipped for o in outcomes)
        log.info(
            "[landing] %d ingested, %d already ingested (same content), %d rejected",
            len(outcomes) - rejected - known, known, rejected,
        )  # fmt: skip
        return 0
    jobs: list[tuple[Path, str, str]] = []
    if args.file:
        if not args.reader:
            msg = "ingest --file needs --reader (a built-in reader, or a source declared in the config)"
            raise ConfigError(msg)
        source = args.source or args.reader
        jobs += [(p, args.reader, source) for p in expand_files(args.file)]
    if args.datasets or not args.file:
        # Airflow passes one templated string; accept commas and spaces alike.
        names = [n for item in args.datasets or [] for n in item.replace(",", " ").split()]
        jobs += [(d.path(settings.data_dir), d.reader, d.source) for d in catalog.select(names or None)]
    spark = _spark(settings, "ingest")
    read = accepted = quarantined = 0
    for s in ingest_files(spark, settings, [FileSpec(str(p), reader, source) for p, reader, source in jobs]):
        log.info("%s", s.line())
        read, accepted, quarantined = read + s.rows_read, accepted + s.accepted, quarantined + s.quarantined
    log.info(
        "[ingest] %d files: %s rows read = %s accepted + %s quarantined",
        len(jobs), f"{read:,}", f"{accepted:,}", f"{quarantined:,}",
    )  # fmt: skip
    return 0


def cmd_ingest_kafka(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest one batch of a Kafka source: what arrived since the last run."""
    from outoforder.stages.ingest.kafka import ingest_topic, kafka_declaration

    kafka_declaration(settings, args.source)  # an unknown source fails before Spark starts
    log.info("%s", ingest_topic(_spark(settings, "ingest-kafka"), settings, args.source).line())
    return 0


def cmd_produce(args: argparse.Namespace, settings: Settings) -> int:
    """Replay a bronze source into a topic and print the declaration that reads it back."""
    from outoforder.stages.ingest.produce import declaration_toml, replay

    spark = _spark(settings, "produce")
    done = replay(
        spark,
        settings,
        args.source,
        args.topic,
        partitions=args.partitions,
        speed=args.speed,
        limit=args.limit,
        live=args.live,
        declaration=(args.name, Path(args.declaration)) if args.declaration else None,
        only_declare=args.only_declare,
    )
    if args.only_declare:
        return 0
    log.info("%s", done.line())
    log.info(
        "[produce] read it back with this in your config:\n%s",
        declaration_toml(args.name, args.topic, done.streams, done.event_range, done.attrs),
    )
    return 0


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    """Generate, inject and ingest one replay (in one file, or in parts of ``--part-s`` seconds)."""
    from outoforder.stages.ingest.files import FileSpec, ingest_file, ingest_files
    from outoforder.stages.ingest.replay import format_report, make_replay, write_replay_parts

    if not 0 < args.rate <= 1:
        msg = f"--rate must be in (0, 1] (a share of the papers' sensor rates), got {args.rate}"
        raise ConfigError(msg)
    if args.part_s is not None:
        name = f"parts-{args.model}-{args.seconds:g}s-seed{args.seed}-r{args.rate:g}-{args.part_s:g}s"
        folder = settings.work_dir / "landing" / name.replace(":", "_").replace(",", "_").replace("=", "")
        parts = write_replay_parts(folder, args.model, args.seconds, args.seed, args.part_s, args.rate)
        log.info("[replay] %s: %s tuples in %d parts under %s", parts.source, f"{parts.tuples:,}",
                 len(parts.paths), folder)  # fmt: skip
        spark = _spark(settings, "replay")
        specs = [FileSpec(str(p), "soccer_synthetic", parts.source) for p in parts.paths]
        for s in ingest_files(spark, settings, specs):
            log.info("%s", s.line())
        return 0
    r = make_replay(settings.work_dir / "landing", args.model, args.seconds, args.seed, args.rate)
    log.info("%s", format_report(r.report))
    spark = _spark(settings, "replay")
    log.info("%s", ingest_file(spark, settings, r.path, "soccer_synthetic", r.source).line())
    return 0


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    """Disorder statistics from bronze."""
    from outoforder.stages.stats import all_sources, format_table, source_stats

    spark = _spark(settings, "stats")
    results = [source_stats(spark, settings, s) for s in args.source or all_sources(spark, settings)]
    log.info("%s", format_table(results, detail=args.detail))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
        log.info("[stats] written to %s", args.json)
    return 0


def cmd_validate(args: argparse.Namespace, settings: Settings) -> int:
    """Great Expectations over bronze."""
    from outoforder.quality.bronze import validate_bronze

    spark = _spark(settings, "validate-bronze")
    validate_bronze(
        spark, settings, fail=False if args.warn_only else _fail(args), run_name=args.run_name,
        since_us=_instant(args.since), until_us=_instant(args.until),
    )  # fmt: skip
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """The main job on the embedded default (every step, or those of ``--steps``)."""
    from outoforder.stages import demo

    steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
    if steps:  # fail before Spark starts
        unknown = [s for s in steps if s not in DEMO_STEPS]
        if unknown:
            msg = f"unknown demo step {', '.join(unknown)} (steps: {', '.join(DEMO_STEPS)})"
            raise ConfigError(msg)
    demo.run(_spark(settings, "demo"), settings, steps, args.preset or None, args.run_name)
    return 0


# --- the stream join ------------------------------------------------------------------------


def cmd_join(args: argparse.Namespace, settings: Settings) -> int:
    """Evaluate QJoin and the baselines on a bronze source or on a user's file."""
    from outoforder.stages.join.evaluate import (
        evaluate_file,
        format_summary,
        run_join_on_source,
        write_summary,
    )

    job = JoinJob.from_options(vars(args))
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if bool(args.source) == bool(args.file):
        msg = "join needs exactly one of --source and --file"
        raise ConfigError(msg)
    if args.file:
        result = evaluate_file(Path(args.file), job, methods)
        name = Path(args.file).stem
    else:
        result = run_join_on_source(_spark(settings, "join"), settings, args.source, job, methods)
        name = args.source.replace("/", "_")
    log.info("%s", format_summary(result))
    out = Path(args.out) if args.out else settings.quality.reports_dir / f"join_{name}.json"
    log.info("[join] quality summary written to %s", write_summary(result, out))
    return 0


def cmd_join_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Run the stream join over [start, end), in steps of --every-s, adapting every --adapt-every-s."""
    from outoforder.stages.join.stream import JoinStream

    stage = JoinStream(
        _spark(settings, "join-stream"), settings, args.source, JoinJob.from_options(vars(args)),
        adapt_every_us=_us(args.adapt_every_s),
    )  # fmt: skip
    stage.run(_instant(args.start), _instant(args.end), _us(args.every_s), catch_up=args.catch_up)
    return 0


def cmd_join_adapt(args: argparse.Namespace, settings: Settings) -> int:
    """Choose the retention in force from --until on."""
    from outoforder.stages.join.adapt import adapt

    job = JoinJob.from_options(vars(args))
    adapt(_spark(settings, "join-adapt"), settings, args.source, job, _required_instant(args.until))
    return 0


def cmd_join_repair(args: argparse.Namespace, settings: Settings) -> int:
    """Add the true pairs the stream join missed before --until."""
    from outoforder.stages.join.repair import repair

    job = JoinJob.from_options(vars(args))
    spark = _spark(settings, "join-repair")
    repair(spark, settings, args.source, job, _required_instant(args.until), _us(args.span_s))
    return 0


def cmd_validate_join(args: argparse.Namespace, settings: Settings) -> int:
    """Recall per closed period and duplicate checks (GX)."""
    from outoforder.stages.join.validate import validate

    job = JoinJob.from_options(vars(args))
    spark = _spark(settings, "validate-join")
    validate(
        spark,
        settings,
        args.source,
        job,
        _required_instant(args.until),
        fail=_fail(args),
        run_name=args.run_name,
        since_us=_instant(args.since),
    )
    return 0


# --- aggregates -------------------------------------------------------------------------------


def cmd_aggregate_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Run the HPM stream stage over [start, end) in steps of --every-s (and the Γ check after each)."""
    from outoforder.stages.aggregate.stream import AggregateStream

    spark = _spark(settings, "aggregate-stream")
    job = AggJob.from_options(vars(args))
    stage = AggregateStream(spark, settings, args.source, job, repair_each=args.repair)
    stage.run(_instant(args.start), _instant(args.end), _us(args.every_s), catch_up=args.catch_up)
    return 0


def cmd_aggregate_repair(args: argparse.Namespace, settings: Settings) -> int:
    """One repair if the Γ rule (or --force) calls for it."""
    from outoforder.stages.aggregate.repair import repair

    spark = _spark(settings, "aggregate-repair")
    log.info("%s", repair(spark, settings, args.source, AggJob.from_options(vars(args)), args.force).line())
    return 0


def cmd_validate_aggregate(args: argparse.Namespace, settings: Settings) -> int:
    """(ε, δ) at emission, exactness after repair, every window once (GX)."""
    from outoforder.stages.aggregate.validate import validate

    spark = _spark(settings, "validate-aggregate")
    job = AggJob.from_options(vars(args))
    validate(
        spark, settings, args.source, job, fail=_fail(args), run_name=args.run_name,
        until_us=_instant(args.until), since_us=_instant(args.since), repaired=args.repaired,
    )  # fmt: skip
    return 0


# --- θ-joins ----------------------------------------------------------------------------------


def cmd_theta_join(args: argparse.Namespace, settings: Settings) -> int:
    """θ-join bronze windows over [start, end) (a backfill interval), or the user's files."""
    if bool(args.file) == bool(args.source):
        msg = "theta-join needs exactly one of --source (bronze) and --file (two or more files)"
        raise ConfigError(msg)
    job = ThetaJob.from_options(vars(args)) if args.source else None
    if job is not None:
        from outoforder.stages.theta.backfill import run_interval

        if args.start is None or args.end is None:
            msg = "a bronze θ-join backfill needs --start and --end (event time)"
            raise ConfigError(msg)
        spark = _spark(settings, "theta-join")
        summary = run_interval(spark, settings, args.source, job, _required_instant(args.start),
                               _required_instant(args.end))  # fmt: skip
        log.info("%s", summary.line())
        return 0
    from outoforder.stages.theta.files import join_files

    predicates = [p.strip() for p in args.predicates.split(",") if p.strip()]
    spark = _spark(settings, "theta-join")
    join_files(
        spark, [Path(f) for f in args.file], args.column, predicates, args.method, args.partitions, args.out
    )
    return 0


def cmd_validate_theta(args: argparse.Namespace, settings: Settings) -> int:
    """GX completeness of a θ-join backfill interval (sampled windows against DuckDB)."""
    from outoforder.stages.theta.validate import validate

    job = ThetaJob.from_options(vars(args))
    spark = _spark(settings, "validate-theta")
    validate(
        spark, settings, args.source, job, _required_instant(args.start), _required_instant(args.end),
        sample=args.sample, fail=_fail(args), run_name=args.run_name,
    )  # fmt: skip
    return 0


# --- top-k ------------------------------------------------------------------------------------


def cmd_topk_stream(args: argparse.Namespace, settings: Settings) -> int:
    """Run the top-k stream stage over [start, end) in steps of --every-s."""
    from outoforder.stages.topk.stream import TopKStream

    spark = _spark(settings, "topk-stream")
    stage = TopKStream(spark, settings, args.source, TopKJob.from_options(vars(args)))
    stage.run(_instant(args.start), _instant(args.end), _us(args.every_s), catch_up=args.catch_up)
    return 0


def cmd_validate_topk(args: argparse.Namespace, settings: Settings) -> int:
    """Every window once, accuracy of the closed windows (GX)."""
    from outoforder.stages.topk.validate import validate

    spark = _spark(settings, "validate-topk")
    job = TopKJob.from_options(vars(args))
    validate(
        spark, settings, args.source, job, fail=_fail(args), run_name=args.run_name,
        until_us=_instant(args.until), since_us=_instant(args.since),
    )  # fmt: skip
    return 0


# --- reports, storage, operations -------------------------------------------------------------


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    """The data-quality report: the cumulative page, and a run's page given --run-name."""
    from outoforder.quality.report import LakeTables, build_reports, headline_text, pages_due

    start, end = _instant(args.start), _instant(args.end)
    due = pages_due(settings, args.run_name)
    if not any(due) and not args.headline and not settings.storage.publish_uri:
        return 0  # nothing to write: no Spark session (pages_due said why)
    spark = _spark(settings, "report")
    tables = LakeTables(spark, settings)
    sections = [x for x in (args.sections or "").replace(",", " ").split() if x] or None
    written = build_reports(
        spark, settings, args.run_name, start, end, tables=tables, sections=sections, due=due
    )
    for path in written:
        log.info("[report] written %s", path)
    if args.headline:
        log.info("%s", headline_text(tables))
    if settings.storage.publish_uri:
        _publish(settings, settings.storage.publish_uri)
    return 0


def _publish(settings: Settings, uri: str) -> None:
    from outoforder.io import objectstore

    q = settings.quality
    n = objectstore.publish(settings.storage, q.reports_dir, uri)
    if q.docs_dir.is_dir() and not q.docs_dir.is_relative_to(q.reports_dir):
        n += objectstore.publish(settings.storage, q.docs_dir, f"{uri.rstrip('/')}/data_docs")
    log.info("[publish] %d files uploaded to %s", n, uri)


def cmd_publish(args: argparse.Namespace, settings: Settings) -> int:
    """Upload the reports folder (and Data Docs) to a bucket."""
    uri = args.to or settings.storage.publish_uri
    if not uri:
        msg = "publish needs --to s3a://bucket/prefix (or storage.publish_uri)"
        raise ConfigError(msg)
    _publish(settings, uri)
    return 0


def cmd_checksum(args: argparse.Namespace, settings: Settings) -> int:
    """Rows and a content digest of every table (see :func:`outoforder.io.delta.content_digest`)."""
    from outoforder.io import delta
    from outoforder.io.tables import ALL_TABLES

    spark = _spark(settings, "checksum")
    names = set(args.tables or [t.name for t in ALL_TABLES])
    digests = delta.content_digests(spark, settings.lake_root, [t for t in ALL_TABLES if t.name in names])
    if args.json:  # data on stdout, for scripts: not a log line
        print("CHECKSUMS" + json.dumps(digests, sort_keys=True), flush=True)
    else:
        for name, d in digests.items():
            print(f"{name:<24} {d['rows']:>12,} rows  {d['digest']}", flush=True)
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
        log.info(
            "[maintain] %d/%d %s: %s files -> %s, %s files unused for the retention period deleted (%.1f s)",
            i, len(chosen), t.name, f"{r['files_before']:,}", f"{r['files_after']:,}", f"{r['vacuumed']:,}",
            time.monotonic() - t0,
        )  # fmt: skip
    return 0


def cmd_landing(args: argparse.Namespace, settings: Settings) -> int:
    """List the landing zone's waiting files."""
    from outoforder.io import objectstore

    items = objectstore.pending(settings.storage)
    if args.json:  # the Airflow sensor reads this line
        print(json.dumps([{"uri": i.uri, "size": i.size} for i in items]), flush=True)
    else:
        for i in items:
            print(f"{i.uri}\t{i.size:,} bytes", flush=True)
        log.info("[landing] %d files waiting under %s/incoming/", len(items), settings.storage.landing_uri)
    return 0


def cmd_buckets(args: argparse.Namespace, settings: Settings) -> int:
    """Create buckets that do not exist yet."""
    from outoforder.io import objectstore

    created = objectstore.ensure_buckets(settings.storage, args.names)
    log.info("[buckets] %s ready (%s created)", ", ".join(args.names), ", ".join(created) or "none")
    if args.pipeline_user:  # its keys from the environment: a secret never goes on a command line
        access = os.environ.get("OOO_S3_PIPELINE_ACCESS_KEY", "")
        objectstore.grant_pipeline(
            settings.storage, access, os.environ.get("OOO_S3_PIPELINE_SECRET_KEY", ""), args.names
        )
        log.info(
            "[buckets] user %s may use %s (policy %s)",
            access,
            ", ".join(args.names),
            objectstore.PIPELINE_POLICY,
        )
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
        print(line, flush=True)
        if args.calibrate and p.name in _BODIES and t is not None:
            print(f"{'':<12} calibrated body (mu, sigma, delayed share): {calibrate_body(t)}", flush=True)
    return 0


# --- the parser -------------------------------------------------------------------------------


def _interval_options(p: argparse.ArgumentParser, every: bool = True) -> None:
    p.add_argument(
        "--start", help="arrival-time interval start (µs or ISO 8601; default: where the job stopped)"
    )
    p.add_argument("--end", help="interval end, exclusive (default: after the newest arrival in bronze)")
    if every:
        p.add_argument(
            "--every-s", type=_seconds, help="split [start, end) into intervals of this many seconds"
        )
    p.add_argument(
        "--catch-up", action="store_true",
        help="start where the job stopped when that is before --end (scheduled runs: no gap, no overlap)",
    )  # fmt: skip


def _since_option(p: argparse.ArgumentParser, items: str) -> None:
    p.add_argument(
        "--since",
        help=f"judge only the {items} closed after this arrival time (a DAG run's interval start; "
        f"default: every closed one)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of all stages (job options generated from the job declarations)."""
    p = argparse.ArgumentParser(
        prog="python -m outoforder.stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="a TOML file overriding include/config/outoforder.toml")
    p.add_argument("--quiet", "-q", action="store_true", help="only warnings and errors, no progress lines")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="as the global --config")
    common.add_argument(
        "--quiet", "-q", action="store_true", default=argparse.SUPPRESS, help="as the global --quiet"
    )
    sub = p.add_subparsers(dest="stage", required=True)

    def stage(
        name: str,
        func: Callable[[argparse.Namespace, Settings], int],
        help_: str,
        *parents: argparse.ArgumentParser,
        source: bool = True,
        exclude: tuple[str, ...] = (),
    ) -> argparse.ArgumentParser:
        """A stage's parser; a stage of :data:`STAGE_JOBS` gets ``--source`` and its job's options."""
        own = list(parents)
        if name in STAGE_JOBS:
            j = argparse.ArgumentParser(add_help=False)
            if source:
                j.add_argument(spec.SOURCE.flag, required=True, help=spec.SOURCE.help)
            spec.add_options(j, STAGE_JOBS[name], exclude=exclude)
            own.insert(0, j)
        s = sub.add_parser(name, parents=[common, *own], help=help_)
        s.set_defaults(func=func)
        return s

    checks = argparse.ArgumentParser(add_help=False)
    checks.add_argument(
        spec.ON_VIOLATION.flag, choices=spec.ON_VIOLATION.choices,
        help=f"{spec.ON_VIOLATION.help} (default: quality.on_violation)",
    )  # fmt: skip
    checks.add_argument("--run-name", help="names this validation in Data Docs and the quality report")

    i = stage("ingest", cmd_ingest, "read files into bronze")
    i.add_argument("--datasets", nargs="*", help="built-in dataset ids or prefixes (default: all)")
    i.add_argument(
        "--file", action="append", help="a file of your own (plain or gzip) or a folder of them; repeatable"
    )
    i.add_argument(
        "--reader",
        help="its format: a source declared in the config ([sources.<name>]) or a built-in reader "
        "(debs2013, soccer_synthetic, ooo, debs2015)",
    )  # fmt: skip
    i.add_argument("--source", help="the source id to store it under (default: the reader's name)")
    i.add_argument("--landing", action="store_true", help="ingest the files waiting in the landing bucket")
    ik = stage("ingest-kafka", cmd_ingest_kafka, "a Kafka source's new records into bronze")
    ik.add_argument("--source", required=True, help="a source declared with a topic ([sources.<name>])")
    pd = stage("produce", cmd_produce, "replay a bronze source into a Kafka topic")
    pd.add_argument("--source", required=True, help="the bronze source to replay, in its arrival order")
    pd.add_argument("--topic", required=True, help="created (log-append time) if it does not exist")
    pd.add_argument("--partitions", type=int, default=3, help="of a topic it creates (default 3)")
    pd.add_argument(
        "--speed", type=_non_negative, default=0.0,
        help="1 = the source's own arrival pace, 10 = ten times faster, 0 = as fast as possible (default)",
    )  # fmt: skip
    pd.add_argument("--limit", type=int, help="only the first N rows")
    pd.add_argument(
        "--live", action="store_true",
        help="shift event times by one constant so the first arrival is now (replays with their own clock)",
    )  # fmt: skip
    pd.add_argument("--name", default="replayed", help="the source name in the printed declaration")
    pd.add_argument("--declaration", help="also write the declaration to this file, before sending")
    pd.add_argument(
        "--only-declare", action="store_true", help="create the topic and write the declaration; send nothing"
    )
    r = stage("replay", cmd_replay, "synthetic soccer play with injected disorder, ingested")
    r.add_argument("--model", default="hpm_game1", help="a preset or family:key=value,...")
    r.add_argument("--seconds", type=_seconds, default=20.0)
    r.add_argument("--seed", type=int, default=7)
    r.add_argument(
        "--rate", type=_positive, default=1.0,
        help="the sensor rates as a share of the papers' (ball 2000 Hz, legs 200 Hz); 0.1: ~1,100 tuples/s",
    )  # fmt: skip
    r.add_argument(
        "--part-s", type=_seconds,
        help="generate and ingest in parts of this many seconds of arrival time (long replays)",
    )  # fmt: skip
    s = stage("stats", cmd_stats, "disorder statistics per source")
    s.add_argument("--source", nargs="*", help="source ids (default: all in bronze)")
    s.add_argument("--detail", action="store_true", help="also print per stream and per key")
    s.add_argument("--json", help="also write the full figures (per stream, per key) here")
    v = stage("validate-bronze", cmd_validate, "Great Expectations over bronze", checks)
    v.add_argument("--warn-only", action="store_true", help="the same as --on-violation warn")
    v.add_argument(
        "--since", help="only the ingests that finished from then on (µs or ISO 8601; default: all)"
    )
    v.add_argument("--until", help="and before this time (with --since)")
    d = stage("demo", cmd_demo, "the main job")
    d.add_argument("--preset", help="disorder preset for the synthetic replay")
    d.add_argument("--steps", help=f"only these steps, comma-separated ({', '.join(DEMO_STEPS)})")
    d.add_argument("--run-name", help="names the steps' validations (Data Docs, the quality report)")

    j = stage(
        "join", cmd_join, "evaluate QJoin and the K-slack baselines", source=False, exclude=("estimator",)
    )
    j.add_argument("--source", help="a bronze source id (e.g. synthetic/hpm_game1-20s-seed7)")
    j.add_argument("--file", help="or a CSV/Parquet file: stream|side, event_ts|ts (µs), x, y (or key)")
    j.add_argument("--methods", default=",".join(JOIN_METHODS), help="comma-separated subset")
    j.add_argument("--out", help="where to write the JSON summary")
    js = stage("join-stream", cmd_join_stream, "the stream join over intervals")
    _interval_options(js)
    js.add_argument(
        "--adapt-every-s", type=_seconds_or_zero,
        help="adapt the retention every this many seconds, counted from the job's first interval "
        "(default: the job's L, --interval-s; at most once per interval; 0: never)",
    )  # fmt: skip
    ja = stage("join-adapt", cmd_join_adapt, "adapt the stream join's retention")
    ja.add_argument("--until", required=True, help="history before this arrival time; in force from it")
    jr = stage("join-repair", cmd_join_repair, "add the pairs the stream missed")
    jr.add_argument("--until", required=True, help="repair the history before this arrival time")
    jr.add_argument(
        "--span-s", type=_seconds, help="only the last this many seconds of arrivals (default: all)"
    )
    vj = stage("validate-join", cmd_validate_join, "GX checks of the stream join", checks)
    vj.add_argument("--until", required=True, help="check the history before this arrival time")
    _since_option(vj, "periods")

    ags = stage("aggregate-stream", cmd_aggregate_stream, "HPM aggregates over intervals")
    _interval_options(ags)
    ags.add_argument(
        "--repair", action="store_true", help="check the Γ rule (and repair) after each interval"
    )
    agr = stage("aggregate-repair", cmd_aggregate_repair, "repair late tuples by the Γ rule")
    agr.add_argument(
        "--force",
        type=_yes,
        nargs="?",
        const=True,
        default=False,
        help="repair whatever is pending, Γ or not",
    )
    va = stage("validate-aggregate", cmd_validate_aggregate, "GX checks of the aggregates", checks)
    va.add_argument(
        "--until", help="check the windows closed by this arrival time (default: the newest state)"
    )
    _since_option(va, "windows")
    va.add_argument(
        "--repaired",
        action="store_true",
        help="check only the windows the newest repair recomputed (DAG late_repair)",
    )

    tj = stage("theta-join", cmd_theta_join, "multi-way θ-join backfill or files", source=False)
    tj.add_argument("--source", help="the bronze source id")
    tj.add_argument("--start", help="event-time interval start (µs or ISO 8601), a window multiple")
    tj.add_argument("--end", help="interval end, exclusive")
    tj.add_argument("--file", action="append", help="a stream of your own (CSV or Parquet); give two or more")
    tj.add_argument("--out", help="with --file: write the result rows here (Parquet)")
    tv = stage("validate-theta", cmd_validate_theta, "GX completeness of a θ backfill", checks)
    tv.add_argument("--start", required=True, help="event-time interval start")
    tv.add_argument("--end", required=True, help="interval end, exclusive")
    tv.add_argument(spec.SAMPLE.flag, type=int, default=spec.SAMPLE.default, help=spec.SAMPLE.help)

    tks = stage("topk-stream", cmd_topk_stream, "continuous top-k over arrival intervals")
    _interval_options(tks)
    vt = stage("validate-topk", cmd_validate_topk, "GX checks of the top-k stream", checks)
    vt.add_argument(
        "--until", help="check the windows closed by this arrival time (default: the newest state)"
    )
    _since_option(vt, "windows")

    rp = stage("report", cmd_report, "the data-quality report (static HTML)")
    rp.add_argument("--run-name", help="also write this run's page (its validations and interval)")
    rp.add_argument("--start", help="the run's arrival-time interval start (µs or ISO 8601)")
    rp.add_argument("--end", help="the run's interval end, exclusive")
    rp.add_argument("--headline", action="store_true", help="also print the targets and baselines tables")
    rp.add_argument(
        "--sections",
        help="the run's page shows only these (join, aggregate, topk, theta, inputs; comma-separated)",
    )
    la = stage("landing", cmd_landing, "files waiting in the landing bucket")
    la.add_argument("--json", action="store_true", help="one JSON list (the Airflow sensor reads it)")
    bu = stage("buckets", cmd_buckets, "create object-store buckets")
    bu.add_argument("names", nargs="+")
    bu.add_argument(
        "--pipeline-user", action="store_true",
        help="also create the pipeline's own user, allowed these buckets only (its keys from "
        "OOO_S3_PIPELINE_ACCESS_KEY and OOO_S3_PIPELINE_SECRET_KEY; the settings' keys are the root's)",
    )  # fmt: skip
    ck = stage("checksum", cmd_checksum, "rows and a content digest per table")
    ck.add_argument("--tables", nargs="*", help="table names, e.g. gold/join_results (default: all)")
    ck.add_argument("--json", action="store_true", help="one line: CHECKSUMS{...}")
    mt = stage("maintain", cmd_maintain, "OPTIMIZE and VACUUM the tables")
    mt.add_argument("--tables", nargs="*", help="table names (default: all)")
    mt.add_argument("--no-optimize", action="store_true", help="only VACUUM")
    pu = stage("publish", cmd_publish, "upload the reports and Data Docs to a bucket")
    pu.add_argument("--to", help="s3a://bucket/prefix (default: storage.publish_uri)")
    pr = stage("presets", cmd_presets, "list disorder presets")
    pr.add_argument("--calibrate", action="store_true", help="re-run the calibration (slow)")
    return p


def _interrupted(signum: int, frame: Any) -> None:
    """SIGTERM (Airflow stopping the task): cancel this run's jobs on the shared server, then exit."""
    for spark in _owned:
        spark.interruptAll()
    raise SystemExit(128 + signum)


def _release() -> None:
    """End this run's Spark Connect sessions: the server drops their views, caches and checkpoints."""
    while _owned:
        _owned.pop().stop()


def _check_stage_conf(settings: Settings, parser: argparse.ArgumentParser) -> None:
    """``[spark.stage_conf]`` names stages this CLI has (a misspelt one would be ignored silently)."""
    stages = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    unknown = sorted(set(settings.spark.stage_conf) - set(stages))
    if unknown:
        msg = f"[spark.stage_conf]: unknown stage {', '.join(unknown)} (stages: {', '.join(sorted(stages))})"
        raise ConfigError(msg)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.quiet)
    try:
        settings = load_settings(args.config)
        _check_stage_conf(settings, parser)
        if args.stage in STAGE_JOBS and getattr(args, "source", None):
            STAGE_JOBS[args.stage].from_options(
                vars(args)
            )  # a job that cannot work fails before Spark starts
        return int(args.func(args, settings))
    except OutOfOrderError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return EXIT_QUALITY if isinstance(e, QualityError) else EXIT_ERROR
    finally:
        _release()
