"""Stage options that are not part of a job: their types, and the groups several stages share.

Standard library only (the stage declarations import it when Airflow parses a DAG). A job's own
options are generated from its declaration (:mod:`outoforder.stages.spec`); what is here are the
interval, the verdict and the like, declared as :class:`Arg` data so that a stage's folder can list
them beside its handler (:mod:`outoforder.stages.registry`).

>>> seconds("2.5")
2.5
>>> seconds("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: takes a finite number of seconds > 0 and at most 1e+09, got '0'
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from outoforder.errors import ConfigError
from outoforder.stages import spec

MAX_SECONDS = 1e9  # about 32 years: beyond it a duration is a typo, and µs would pass int64 soon after


@dataclass(frozen=True)
class Arg:
    """One command-line option of a stage, as :meth:`argparse.ArgumentParser.add_argument` takes it."""

    flags: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Add the option to ``parser``."""
        parser.add_argument(*self.flags, **self.options)

    @property
    def dest(self) -> str:
        """The namespace attribute it fills."""
        if "dest" in self.options:
            return str(self.options["dest"])
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.lstrip("-").replace("-", "_")


def arg(*flags: str, **options: Any) -> Arg:
    """An option declared as data: ``arg("--until", required=True, help=...)``."""
    return Arg(flags, options)


def _number(text: str, *, zero: bool, unit: str = "", upper: float = math.inf) -> float:
    """A finite number > 0 (>= 0 where ``zero`` has a meaning) and at most ``upper``, or a usage error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value > 0 or (zero and value == 0)) and value <= upper):
        bounds = (">= 0" if zero else "> 0") + (f" and at most {upper:g}" if math.isfinite(upper) else "")
        msg = f"takes a finite number{unit} {bounds}, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def seconds(text: str) -> float:
    """A duration in seconds, > 0."""
    return _number(text, zero=False, unit=" of seconds", upper=MAX_SECONDS)


def seconds_or_zero(text: str) -> float:
    """A duration in seconds where 0 means something (never, as fast as possible)."""
    return _number(text, zero=True, unit=" of seconds", upper=MAX_SECONDS)


def positive(text: str) -> float:
    """A finite number > 0 (a rate)."""
    return _number(text, zero=False)


def non_negative(text: str) -> float:
    """A finite number >= 0 (a speed-up, 0: as fast as possible)."""
    return _number(text, zero=True)


def yes(text: str) -> bool:
    """true/yes/1/"" or false/no/0 (a templated DAG value)."""
    if text.lower() in ("true", "yes", "1", ""):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    msg = f"expected true or false, got {text!r}"
    raise argparse.ArgumentTypeError(msg)


def instant(text: str | None) -> int | None:
    """µs since the epoch, or ISO 8601, as µs (None stays None)."""
    from outoforder.core.time import parse_instant_us

    if text is None:
        return None
    try:
        return parse_instant_us(text)
    except ValueError as e:
        msg = f"not an instant (µs since the epoch or ISO 8601): {text!r}"
        raise ConfigError(msg) from e


def required_instant(text: str | None) -> int:
    """An instant that must be given (argparse marks these required; this guards direct callers)."""
    value = instant(text)
    if value is None:
        msg = "an instant is required"
        raise ConfigError(msg)
    return value


def us(seconds_: float | None) -> int | None:
    """Seconds (the interface's unit) as µs (the unit inside)."""
    return None if seconds_ is None else round(seconds_ * 1e6)


def verdict(args: argparse.Namespace) -> bool | None:
    """``--on-violation`` as the stages take it (None: the configured ``quality.on_violation``)."""
    value = getattr(args, "on_violation", None)
    return None if value is None else value == "fail"


# --- groups several stages share --------------------------------------------------------------

PASS = (
    arg("--start", help="where the job's first pass starts, by arrival time (µs or ISO 8601; default: the "
        "source's first arrival); later passes start where the job stands"),
    arg("--end", help="where the pass ends, exclusive (default: as far as the ingest has delivered)"),
    arg("--catch-up", action=argparse.BooleanOptionalAction, default=False,
        help="a --start after where the job stands is not an error: the pass starts where the job stands "
        "(scheduled runs; a backfill's runs pass --no-catch-up)"),
)  # fmt: skip
"""What a stream stage that runs one pass per run takes (:mod:`outoforder.stages.passes`)."""

CHECKS = (
    arg(
        spec.ON_VIOLATION.flag,
        choices=spec.ON_VIOLATION.choices,
        help=f"{spec.ON_VIOLATION.help} (default: quality.on_violation)",
    ),
    arg("--run-name", help="names this validation in Data Docs and the quality report"),
)
"""What every validation stage takes."""


def until(what: str, *, required: bool = True) -> Arg:
    """``--until``: the arrival time a stage works (or judges) before."""
    return arg("--until", required=required, help=what)


def since(items: str) -> tuple[Arg, ...]:
    """``--since`` and ``--from-judged``: a check judges only what closed from a point on."""
    return (
        arg(
            "--since",
            help=f"judge only the {items} closed after this arrival time (a DAG run's interval start; "
            f"default: every closed one)",
        ),
        arg(
            "--from-judged",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="start where this check's runs last judged when that is before --since "
            "(gold/check_positions; scheduled runs: nothing closes unjudged between runs and a "
            "failed verdict is not judged again; a backfill's runs pass --no-from-judged)",
        ),
    )


def validation(*own: Arg) -> tuple[Arg, ...]:
    """A validation stage's options: the verdict and run name, then its own."""
    return (*CHECKS, *own)
