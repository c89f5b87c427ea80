"""The operations stages as the CLI runs them: each handler takes the stage context and the options."""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

from outoforder.config import Settings
from outoforder.errors import ConfigError
from outoforder.stages.context import StageContext
from outoforder.stages.options import instant

log = logging.getLogger("outoforder.stages")


def demo(ctx: StageContext, args: argparse.Namespace) -> int:
    """The main job on the embedded default (every step, or those of ``--steps``)."""
    from outoforder.stages import demo

    steps = [s.strip() for s in args.steps.split(",") if s.strip()] if args.steps else None
    demo.run(ctx, steps, args.preset or None, args.run_name)
    return 0


def report(ctx: StageContext, args: argparse.Namespace) -> int:
    """The data-quality report: the cumulative page, and a run's page given --run-name."""
    from outoforder.quality.panels import LakeTables
    from outoforder.quality.report import build_reports, headline_text, pages_due

    settings = ctx.settings
    start, end = instant(args.start), instant(args.end)
    due = pages_due(settings, args.run_name)
    if not any(due) and not args.headline and not settings.storage.publish_uri:
        return 0  # nothing to write: no Spark session (pages_due said why)
    spark = ctx.spark
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


def publish(ctx: StageContext, args: argparse.Namespace) -> int:
    """Upload the reports folder (and Data Docs) to a bucket."""
    settings = ctx.settings
    uri = args.to or settings.storage.publish_uri
    if not uri:
        msg = "publish needs --to s3a://bucket/prefix (or storage.publish_uri)"
        raise ConfigError(msg)
    _publish(settings, uri)
    return 0


def checksum(ctx: StageContext, args: argparse.Namespace) -> int:
    """Rows and a content digest of every table (see :func:`outoforder.io.delta.content_digest`)."""
    from outoforder.io import delta
    from outoforder.io.tables import ALL_TABLES

    settings = ctx.settings
    spark = ctx.spark
    names = set(args.tables or [t.name for t in ALL_TABLES])
    digests = delta.content_digests(spark, settings.lake_root, [t for t in ALL_TABLES if t.name in names])
    if args.json:  # data on stdout, for scripts: not a log line
        print("CHECKSUMS" + json.dumps(digests, sort_keys=True), flush=True)
    else:
        for name, d in digests.items():
            print(f"{name:<24} {d['rows']:>12,} rows  {d['digest']}", flush=True)
    return 0


def maintain(ctx: StageContext, args: argparse.Namespace) -> int:
    """Compact and vacuum the tables (all, or --tables), one at a time, retrying on conflicts."""
    from outoforder.io import delta
    from outoforder.io.conflicts import retry_on_conflict
    from outoforder.io.tables import ALL_TABLES

    settings = ctx.settings
    names = set(args.tables or [t.name for t in ALL_TABLES])
    unknown = sorted(names - {t.name for t in ALL_TABLES})
    if unknown:
        msg = f"unknown table {', '.join(unknown)}"
        raise ConfigError(msg)
    spark = ctx.spark
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


def landing(ctx: StageContext, args: argparse.Namespace) -> int:
    """List the landing zone's waiting files."""
    from outoforder.io import objectstore

    settings = ctx.settings
    items = objectstore.pending(settings.storage)
    if args.json:  # the Airflow sensor reads this line
        print(json.dumps([{"uri": i.uri, "size": i.size} for i in items]), flush=True)
    else:
        for i in items:
            print(f"{i.uri}\t{i.size:,} bytes", flush=True)
        log.info("[landing] %d files waiting under %s/incoming/", len(items), settings.storage.landing_uri)
    return 0


def buckets(ctx: StageContext, args: argparse.Namespace) -> int:
    """Create buckets that do not exist yet."""
    from outoforder.io import objectstore

    settings = ctx.settings
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


def presets(ctx: StageContext, args: argparse.Namespace) -> int:
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


def stages(ctx: StageContext, args: argparse.Namespace) -> int:
    """Every stage the registry holds (the built-in folders and the installed operators)."""
    from outoforder.stages import registry

    if args.markdown:  # data on stdout, for the docs: not a log line
        print(registry.markdown_table(), end="", flush=True)
        return 0
    for op in registry.operators():
        for s in op.stages:
            job = f" [{s.job.__name__}]" if s.job is not None else ""
            print(f"{op.name:<11} {s.name:<19} {s.help}{job}", flush=True)
    return 0
