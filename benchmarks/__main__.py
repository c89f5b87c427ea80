"""``python -m benchmarks <name> [--quick] [--out DIR] [--no-spark]``: run a benchmark."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness import DEFAULT_OUT
from outoforder.errors import OutOfOrderError


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run one benchmark."""
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument(
        "name",
        choices=[
            "join",
            "aggregate",
            "theta",
            "topk",
            "mcf",
            "scaling",
            "reliability",
            "longrun",
            "scale",
            "sources",
            "live",
            "families",
            "tuning",
            "growth",
        ],
        help="which benchmark",
    )
    p.add_argument(
        "--quick", action="store_true", help="a small replay and two targets (minutes, for a smoke run)"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--data-dir", type=Path, help="the shared data folder (default: from the config)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark candidates (set forms only)")
    p.add_argument("--quiet", "-q", action="store_true", help="only warnings and errors, no progress lines")
    args = p.parse_args(argv)
    from outoforder.stages.cli import configure_logging

    configure_logging(args.quiet)
    from benchmarks import (
        aggregate,
        families,
        growth,
        join,
        live,
        longrun,
        mcf,
        reliability,
        scale,
        scaling,
        sources,
        theta,
        topk,
        tuning,
    )

    benches: dict[str, Callable[..., int]] = {
        "join": join.main,
        "aggregate": aggregate.main,
        "theta": theta.main,
        "topk": topk.main,
        "mcf": mcf.main,
        "scaling": scaling.main,
        "reliability": reliability.main,
        "longrun": longrun.main,
        "scale": scale.main,
        "sources": sources.main,
        "live": live.main,
        "families": families.main,
        "tuning": tuning.main,
        "growth": growth.main,
    }
    bench = benches[args.name]
    try:
        return bench(args.out, args.data_dir, args.quick, spark_on=not args.no_spark)
    except OutOfOrderError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
