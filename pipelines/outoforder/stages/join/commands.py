"""The stream join's stages as the CLI runs them: each handler takes the stage context and the options."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path

from outoforder.errors import ConfigError
from outoforder.stages.context import StageContext
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.options import instant, required_instant, us, verdict

log = logging.getLogger("outoforder.stages")


def join(ctx: StageContext, args: argparse.Namespace) -> int:
    """Evaluate QJoin and the baselines on a bronze source or on a user's file."""
    from outoforder.stages.join.evaluate import (
        evaluate_file,
        format_summary,
        run_join_on_source,
        write_summary,
    )

    job = JoinJob.from_options(vars(args))
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if bool(ctx.source) == bool(args.file):
        msg = "join needs exactly one of --source and --file"
        raise ConfigError(msg)
    if args.file:
        result = evaluate_file(Path(args.file), job, methods)
        name = Path(args.file).stem
    else:
        result = run_join_on_source(replace(ctx, job=job), methods)
        name = ctx.bronze_source.replace("/", "_")
    log.info("%s", format_summary(result))
    out = Path(args.out) if args.out else ctx.settings.quality.reports_dir / f"join_{name}.json"
    log.info("[join] quality summary written to %s", write_summary(result, out))
    return 0


def join_stream(ctx: StageContext, args: argparse.Namespace) -> int:
    """One pass of the stream join from where the job stands to --end."""
    from outoforder.stages.join.stream import JoinStream

    JoinStream(ctx).run(instant(args.start), instant(args.end), catch_up=args.catch_up)
    return 0


def join_repair(ctx: StageContext, args: argparse.Namespace) -> int:
    """Add the true pairs the stream join missed before --until."""
    from outoforder.stages.join.repair import repair

    repair(ctx, required_instant(args.until), us(args.span_s))
    return 0


def validate_join(ctx: StageContext, args: argparse.Namespace) -> int:
    """Recall per closed period and duplicate checks (GX)."""
    from outoforder.stages.join import validate
    from outoforder.stages.positions import judging

    with judging(ctx, args) as (since, until):
        validate.validate_join(ctx, until, fail=verdict(args), run_name=args.run_name, since_us=since)
    return 0
