"""Command line of the pipeline stages: ``python -m outoforder.stages <stage> [options]``.

The stages and their options are generated from the declarations in each operator's folder
(:mod:`outoforder.stages.registry`); ``--help`` lists them. Every stage logs its progress and ends
with a summary (``--quiet``: warnings and errors only); errors of ours exit with status 2 and a
one-line reason, anything else is a bug and shows its traceback. Nothing heavy is imported until a
stage runs, so ``--help`` is instant and the parser can be checked against the DAGs in Airflow's venv.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from outoforder.config import Settings, load_settings
from outoforder.errors import (
    EXIT_ERROR,
    EXIT_NOTHING_YET,
    EXIT_QUALITY,
    ConfigError,
    NothingYet,
    OutOfOrderError,
    QualityError,
)
from outoforder.stages import registry, spec
from outoforder.stages.context import StageContext, release


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every declared stage."""
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
    sub = p.add_subparsers(dest="stage", required=True, metavar="<stage>")
    for s in registry.stages():
        own = argparse.ArgumentParser(add_help=False)
        if s.job is not None:
            if s.source:
                own.add_argument(spec.SOURCE.flag, required=True, help=spec.SOURCE.help)
            spec.add_options(own, s.job, exclude=s.exclude)
        for a in s.args:
            a.add_to(own)
        sub.add_parser(s.name, parents=[common, own], help=s.help, description=s.help)
    return p


def _check_stage_conf(settings: Settings) -> None:
    """``[spark.stage_conf]`` names stages that exist (a misspelt one would be ignored silently)."""
    names = sorted(s.name for s in registry.stages())
    unknown = sorted(set(settings.spark.stage_conf) - set(names))
    if unknown:
        msg = f"[spark.stage_conf]: unknown stage {', '.join(unknown)} (stages: {', '.join(names)})"
        raise ConfigError(msg)


def context(stage: registry.Stage, args: argparse.Namespace, settings: Settings) -> StageContext:
    """The stage's context: its job built (and checked) from the options when it has a source."""
    source = getattr(args, "source", None)
    if isinstance(source, list):  # stats takes several
        source = None
    job = stage.job.from_options(vars(args)) if stage.job is not None and source else None
    return StageContext(stage.name, settings, source, job)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.quiet)
    try:
        settings = load_settings(args.config)
        _check_stage_conf(settings)
        stage = registry.stage(args.stage)
        ctx = context(stage, args, settings)  # a job that cannot work fails before Spark starts
        return int(stage.handler()(ctx, args) or 0)
    except NothingYet as e:
        print(f"nothing to do yet: {e}", file=sys.stderr, flush=True)
        return EXIT_NOTHING_YET
    except OutOfOrderError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return EXIT_QUALITY if isinstance(e, QualityError) else EXIT_ERROR
    finally:
        release()
