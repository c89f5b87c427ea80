"""The top-k stages as the CLI runs them: each handler takes the stage context and the parsed options."""

from __future__ import annotations

import argparse

from outoforder.stages.context import StageContext
from outoforder.stages.options import instant, verdict


def topk_stream(ctx: StageContext, args: argparse.Namespace) -> int:
    """One pass of the top-k stream stage from where the job stands to --end."""
    from outoforder.stages.topk.stream import TopKStream

    TopKStream(ctx).run(instant(args.start), instant(args.end), catch_up=args.catch_up)
    return 0


def validate_topk(ctx: StageContext, args: argparse.Namespace) -> int:
    """Every window once, accuracy of the closed windows (GX)."""
    from outoforder.stages.positions import judging
    from outoforder.stages.topk import validate

    with judging(ctx, args) as (since, until):
        validate.validate_topk(
            ctx, fail=verdict(args), run_name=args.run_name, until_us=until, since_us=since
        )
    return 0
