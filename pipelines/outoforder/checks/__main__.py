"""``python -m outoforder.checks [NAME ...]``: the contract checked over every installed operator's cases.

Each case (or only those named) runs :func:`~outoforder.checks.check_operator` over ``--seeds``
disordered streams; one line per case, and exit status 1 when any breaks the contract.
"""

from __future__ import annotations

import argparse
import logging
import sys

from outoforder.checks import ContractViolation, check_operator, installed_cases
from outoforder.stages.cli import configure_logging

log = logging.getLogger("outoforder.checks")


def main(argv: list[str] | None = None) -> int:
    """Check the cases; the process's exit status."""
    p = argparse.ArgumentParser(prog="python -m outoforder.checks", description=__doc__)
    p.add_argument("names", nargs="*", help="the cases to check (default: all)")
    p.add_argument("--seeds", type=int, default=5, help="disordered streams per case (default 5)")
    args = p.parse_args(argv)
    configure_logging()
    cases = installed_cases()
    unknown = sorted(set(args.names) - {c.name for c in cases})
    if unknown:
        p.error(f"no case {', '.join(unknown)} (cases: {', '.join(c.name for c in cases)})")
    broken = 0
    for case in cases:
        if args.names and case.name not in args.names:
            continue
        try:
            check_operator(case, seeds=range(args.seeds))
        except ContractViolation as e:
            broken += 1
            log.error("[checks] BROKEN %s", e)
        else:
            log.info("[checks] ok     %s", case.name)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
