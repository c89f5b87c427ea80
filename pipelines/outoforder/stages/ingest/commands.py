"""The ingest stages as the CLI runs them: each handler takes the stage context and the parsed options."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from outoforder.errors import ConfigError, InputError
from outoforder.stages.context import StageContext
from outoforder.stages.options import instant, verdict

log = logging.getLogger("outoforder.stages")


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


def ingest(ctx: StageContext, args: argparse.Namespace) -> int:
    """Ingest built-in datasets and/or one user file, or the landing bucket."""
    from outoforder.sources import catalog
    from outoforder.stages.ingest.files import ingest_files
    from outoforder.stages.ingest.plan import FileSpec

    settings = ctx.settings
    if args.landing:
        from outoforder.stages.ingest.landing import ingest_landing

        outcomes = ingest_landing(ctx.spark, settings)
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
    spark = ctx.spark
    read = accepted = quarantined = 0
    for s in ingest_files(spark, settings, [FileSpec(str(p), reader, source) for p, reader, source in jobs]):
        log.info("%s", s.line())
        read, accepted, quarantined = read + s.rows_read, accepted + s.accepted, quarantined + s.quarantined
    log.info(
        "[ingest] %d files: %s rows read = %s accepted + %s quarantined",
        len(jobs), f"{read:,}", f"{accepted:,}", f"{quarantined:,}",
    )  # fmt: skip
    return 0


def ingest_kafka(ctx: StageContext, args: argparse.Namespace) -> int:
    """Ingest one batch of a Kafka source: what arrived since the last run."""
    from outoforder.stages.ingest.kafka import ingest_topic, kafka_declaration

    settings = ctx.settings
    kafka_declaration(settings, args.source)  # an unknown source fails before Spark starts
    log.info("%s", ingest_topic(ctx.spark, settings, args.source).line())
    return 0


def produce(ctx: StageContext, args: argparse.Namespace) -> int:
    """Replay a bronze source into a topic and print the declaration that reads it back."""
    from outoforder.stages.ingest.produce import declaration_toml
    from outoforder.stages.ingest.produce import replay as send

    settings = ctx.settings
    spark = ctx.spark
    done = send(
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


def replay(ctx: StageContext, args: argparse.Namespace) -> int:
    """Generate, inject and ingest one replay (in one file, or in parts of ``--part-s`` seconds)."""
    from outoforder.stages.ingest.files import ingest_file, ingest_files
    from outoforder.stages.ingest.plan import FileSpec
    from outoforder.stages.ingest.replay import format_report, make_replay, write_replay_parts

    settings = ctx.settings
    if not 0 < args.rate <= 1:
        msg = f"--rate must be in (0, 1] (a share of the papers' sensor rates), got {args.rate}"
        raise ConfigError(msg)
    if args.part_s is not None:
        name = f"parts-{args.model}-{args.seconds:g}s-seed{args.seed}-r{args.rate:g}-{args.part_s:g}s"
        folder = settings.work_dir / "landing" / name.replace(":", "_").replace(",", "_").replace("=", "")
        parts = write_replay_parts(folder, args.model, args.seconds, args.seed, args.part_s, args.rate)
        log.info("[replay] %s: %s tuples in %d parts under %s", parts.source, f"{parts.tuples:,}",
                 len(parts.paths), folder)  # fmt: skip
        spark = ctx.spark
        specs = [FileSpec(str(p), "soccer_synthetic", parts.source) for p in parts.paths]
        for s in ingest_files(spark, settings, specs):
            log.info("%s", s.line())
        return 0
    r = make_replay(settings.work_dir / "landing", args.model, args.seconds, args.seed, args.rate)
    log.info("%s", format_report(r.report))
    spark = ctx.spark
    log.info("%s", ingest_file(spark, settings, r.path, "soccer_synthetic", r.source).line())
    return 0


def stats(ctx: StageContext, args: argparse.Namespace) -> int:
    """Disorder statistics from bronze."""
    from outoforder.stages.stats import all_sources, format_table, source_stats

    settings = ctx.settings
    spark = ctx.spark
    results = [source_stats(spark, settings, s) for s in args.source or all_sources(spark, settings)]
    log.info("%s", format_table(results, detail=args.detail))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=1))
        log.info("[stats] written to %s", args.json)
    return 0


def validate_bronze(ctx: StageContext, args: argparse.Namespace) -> int:
    """Great Expectations over bronze."""
    from outoforder.quality.bronze import validate_bronze

    settings = ctx.settings
    spark = ctx.spark
    validate_bronze(
        spark, settings, fail=False if args.warn_only else verdict(args), run_name=args.run_name,
        since_us=instant(args.since), until_us=instant(args.until),
    )  # fmt: skip
    return 0
