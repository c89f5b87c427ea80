"""Command line of the pipeline stages: ``python -m outoforder.stages <stage> [options]``.

Stages::

    ingest          read files into bronze (built-in datasets, or --file/--reader/--source)
    replay          generate synthetic soccer play with injected disorder and ingest it
    stats           disorder statistics per source from bronze (late fraction, mean/max delay)
    validate-bronze Great Expectations suites over bronze (fails on violation)
    join            QJoin and the K-slack baselines on a bronze source or a file, vs the truth
    demo            the main job: ingest everything, one injected preset, statistics, checks, join
    presets         list the disorder presets (or re-run their calibration)

Every stage prints progress and ends with a summary; errors of ours exit with status 2 and a
one-line reason, anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from outoforder.config import Settings, load_settings
from outoforder.errors import InputError, OutOfOrderError
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

    landing = settings.lake_root.parent / "landing"
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


def cmd_validate(args: argparse.Namespace, settings: Settings) -> int:
    """Great Expectations over bronze."""
    from outoforder.quality.bronze import validate_bronze

    spark = _spark(settings, "validate")
    validate_bronze(spark, settings, fail=not args.warn_only)
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
    out = Path(args.out) if args.out else settings.lake_root.parent / "reports" / f"join_{name}.json"
    print(f"[join] quality summary written to {write_summary(result, out)}", flush=True)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """The main job on the embedded default."""
    from outoforder.quality.bronze import validate_bronze
    from outoforder.sources import catalog
    from outoforder.stages.ingest import ingest_file
    from outoforder.stages.replay import format_report, make_replay
    from outoforder.stages.stats import format_table, source_stats

    t0 = time.monotonic()
    spark = _spark(settings, "demo")
    sources: list[str] = []
    missing = [
        str(d.path(settings.data_dir)) for d in catalog.BUILTIN if not d.path(settings.data_dir).exists()
    ]
    if missing:
        msg = (
            f"{len(missing)} of the shared datasets are missing (first: {missing[0]}); the main job "
            "expects the shared data folder at ../shared/data: set OOO_DATA_DIR to where it is"
        )
        raise InputError(msg)
    print(f"[demo] 1/5 ingesting the real datasets from {settings.data_dir}", flush=True)
    for d in catalog.BUILTIN:
        path = d.path(settings.data_dir)
        print(ingest_file(spark, settings, path, d.reader, d.source).line(), flush=True)
        sources.append(d.source)
    preset = args.preset or settings.demo.preset
    print(
        f"[demo] 2/5 synthetic soccer play ({settings.demo.synthetic_seconds:g} s) with the "
        f"'{preset}' disorder preset",
        flush=True,
    )
    replay = make_replay(
        settings.lake_root.parent / "landing", preset, settings.demo.synthetic_seconds, settings.demo.seed
    )
    print(format_report(replay.report), flush=True)
    print(ingest_file(spark, settings, replay.path, "soccer_synthetic", replay.source).line(), flush=True)
    sources.append(replay.source)
    print("[demo] 3/5 disorder statistics (arrival order = arrival_seq)", flush=True)
    results = [source_stats(spark, settings, s) for s in sources]
    out = settings.lake_root.parent / "reports" / "disorder_stats.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(format_table(results), flush=True)
    print("[demo] 4/5 data quality of bronze (Great Expectations)", flush=True)
    validate_bronze(spark, settings)
    from outoforder.stages.join import JoinJob, format_summary, run_join_on_source, write_summary

    job = JoinJob()
    print(
        f"[demo] 5/5 stream join on {replay.source}: ball vs players, w = {job.window_us / 1e6:g} s, "
        f"theta = {job.theta:g} m, Q_user = {job.q_user}, P = {job.period_us / 1e6:g} s, "
        f"L = {job.interval_us / 1e6:g} s",
        flush=True,
    )
    result = run_join_on_source(spark, settings, replay.source, job, JOIN_METHODS)
    print(format_summary(result), flush=True)
    join_out = write_summary(result, out.parent / f"join_{replay.source.replace('/', '_')}.json")
    print(
        f"[demo] done in {time.monotonic() - t0:.0f} s; lake at {settings.lake_root}; statistics in {out}; "
        f"join quality summary in {join_out}",
        flush=True,
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
    v = sub.add_parser("validate-bronze", parents=[common], help="Great Expectations over bronze")
    v.add_argument("--warn-only", action="store_true", help="report failures without failing")
    v.set_defaults(func=cmd_validate)
    d = sub.add_parser("demo", parents=[common], help="the main job")
    d.add_argument("--preset", help="disorder preset for the synthetic replay")
    d.set_defaults(func=cmd_demo)
    j = sub.add_parser("join", parents=[common], help="evaluate QJoin and the K-slack baselines")
    j.add_argument("--source", help="a bronze source id (e.g. synthetic/hpm_game1-20s-seed7)")
    j.add_argument("--file", help="or a CSV/Parquet file: stream|side, event_ts|ts (µs), x, y, key")
    j.add_argument("--r-streams", default="ball", help="streams forming R (comma-separated)")
    j.add_argument("--s-streams", default="team_a,team_b", help="streams forming S")
    j.add_argument("--window-ms", type=float, default=500.0, help="w: |r.ts - s.ts| <= w")
    j.add_argument("--theta", type=float, default=2.0, help="distance threshold (metres)")
    j.add_argument("--predicate", choices=["distance", "key"], default="distance")
    j.add_argument("--q-user", type=float, default=0.95, help="recall target per period")
    j.add_argument("--period-s", type=float, default=5.0, help="P")
    j.add_argument("--interval-s", type=float, default=0.5, help="L, the adaptation interval")
    j.add_argument("--methods", default=",".join(JOIN_METHODS), help="comma-separated subset")
    j.add_argument("--out", help="where to write the JSON summary")
    j.set_defaults(func=cmd_join)
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
