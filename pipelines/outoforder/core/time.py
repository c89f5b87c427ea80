"""Event time is int64 microseconds since the epoch, UTC, everywhere in the project.

>>> ps_to_us(10_753_295_594_424_116)
10753295594
>>> us_to_seconds(4_544_000)
4.544
"""

from __future__ import annotations

from datetime import UTC, datetime

US_PER_SECOND = 1_000_000


def ps_to_us(ps: int) -> int:
    """Picoseconds (DEBS 2013 sensor clock) to microseconds, truncating like integer division."""
    return ps // 1_000_000


def ms_to_us(ms: int) -> int:
    """Milliseconds (OoO-Dataset clocks) to microseconds."""
    return ms * 1_000


def seconds_to_us(seconds: float) -> int:
    """Seconds to microseconds, rounded to the nearest microsecond."""
    return round(seconds * US_PER_SECOND)


def us_to_seconds(us: int | float) -> float:
    """Microseconds to seconds."""
    return us / US_PER_SECOND


def naive_utc_to_us(text: str, fmt: str = "%Y-%m-%d %H:%M:%S") -> int:
    """Parse a wall-clock string that carries no zone (DEBS 2015 taxi rows) as UTC microseconds.

    The taxi data is New York local time; we keep the wall-clock digits and label them UTC so that
    differences (delays) are exact and nothing depends on the machine's zone or on DST rules.

    >>> naive_utc_to_us("1970-01-01 00:00:01")
    1000000
    """
    parsed = datetime.strptime(text, fmt).replace(tzinfo=UTC)
    return int(parsed.timestamp()) * US_PER_SECOND + parsed.microsecond
