"""The toy's stage handlers."""

from __future__ import annotations

import argparse
import logging

from outoforder.errors import ConfigError
from outoforder.stages.context import StageContext

log = logging.getLogger("outoforder.stages")


def toy_stream(ctx: StageContext, args: argparse.Namespace) -> int:
    """Count the arrivals of ``--file`` per window with the Spark step."""
    from toy_ooo.spark import counts

    if not args.file:
        msg = "toy-stream needs --file"
        raise ConfigError(msg)
    frame = ctx.spark.read.csv(args.file, header=True, inferSchema=True)
    rows = sorted(tuple(r) for r in counts(frame, ctx.job.window_us).collect())  # type: ignore[union-attr]
    log.info("[toy] %d windows: %s", len(rows), rows)
    return 0


def validate_toy(ctx: StageContext, args: argparse.Namespace) -> int:
    """Nothing to judge in the toy: the stage exists for its DAG's shape."""
    log.info("[toy] validate %s (job %s)", ctx.source, ctx.job.job_id() if ctx.job else None)
    return 0
