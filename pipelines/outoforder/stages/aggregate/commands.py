"""The aggregate stages as the CLI runs them: each handler takes the stage context and the parsed options."""

from __future__ import annotations

import argparse
import logging

from outoforder.stages.context import StageContext
from outoforder.stages.options import instant, verdict

log = logging.getLogger("outoforder.stages")


def aggregate_stream(ctx: StageContext, args: argparse.Namespace) -> int:
    """One pass of the HPM stream stage from where the job stands to --end (and the Γ check after it)."""
    from outoforder.stages.aggregate.stream import AggregateStream

    AggregateStream(ctx, repair_each=args.repair).run(
        instant(args.start), instant(args.end), catch_up=args.catch_up
    )
    return 0


def aggregate_repair(ctx: StageContext, args: argparse.Namespace) -> int:
    """One repair if the Γ rule (or --force) calls for it."""
    from outoforder.stages.aggregate.repair import repair

    log.info("%s", repair(ctx, args.force).line())
    return 0


def validate_aggregate(ctx: StageContext, args: argparse.Namespace) -> int:
    """(ε, δ) at emission, exactness after repair, every window once (GX)."""
    from outoforder.stages.aggregate import validate
    from outoforder.stages.positions import judging

    with judging(ctx, args) as (since, until):
        validate.validate_aggregate(
            ctx,
            fail=verdict(args),
            run_name=args.run_name,
            until_us=until,
            since_us=since,
            repaired=args.repaired,
        )
    return 0
