"""The θ-join stages as the CLI runs them: each handler takes the stage context and the parsed options."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from outoforder.errors import ConfigError
from outoforder.stages.context import StageContext
from outoforder.stages.options import required_instant, verdict
from outoforder.stages.theta.spec import ThetaJob

log = logging.getLogger("outoforder.stages")


def theta_join(ctx: StageContext, args: argparse.Namespace) -> int:
    """θ-join bronze windows over [start, end) (a backfill interval), or the user's files."""
    if bool(args.file) == bool(ctx.source):
        msg = "theta-join needs exactly one of --source (bronze) and --file (two or more files)"
        raise ConfigError(msg)
    if isinstance(ctx.job, ThetaJob):
        from outoforder.stages.theta.backfill import run_interval

        if args.start is None or args.end is None:
            msg = "a bronze θ-join backfill needs --start and --end (event time)"
            raise ConfigError(msg)
        start, end = required_instant(args.start), required_instant(args.end)
        log.info("%s", run_interval(ctx, start, end).line())
        return 0
    from outoforder.stages.theta.files import join_files

    # files: any column and predicate (the job's choices are bronze's), so no job is built
    predicates = [p.strip() for p in args.predicates.split(",") if p.strip()]
    files = [Path(f) for f in args.file]
    join_files(ctx.spark, files, args.column, predicates, args.method, args.partitions, args.out)
    return 0


def validate_theta(ctx: StageContext, args: argparse.Namespace) -> int:
    """GX completeness of a θ-join backfill interval (sampled windows against DuckDB)."""
    from outoforder.stages.theta import validate

    start, end = required_instant(args.start), required_instant(args.end)
    validate.validate_theta(ctx, start, end, sample=args.sample, fail=verdict(args), run_name=args.run_name)
    return 0
