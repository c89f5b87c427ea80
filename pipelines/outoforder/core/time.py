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


def parse_instant_us(text: str) -> int:
    """An instant given as integer µs since the epoch or as an ISO 8601 date-time (UTC if no zone).

    Airflow passes data intervals as ISO strings; replays and bronze speak µs.

    >>> parse_instant_us("1500000")
    1500000
    >>> parse_instant_us("1970-01-01T00:00:01.5+00:00")
    1500000
    >>> parse_instant_us("1970-01-01 00:00:02")
    2000000
    """
    s = text.strip()
    if s.lstrip("-").isdigit():
        return int(s)
    parsed = datetime.fromisoformat(s.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * US_PER_SECOND + delta.microseconds


def format_instant_us(us: int) -> str:
    """µs since the epoch as ISO 8601 UTC, as Airflow's CLI takes it (the inverse of the above).

    >>> format_instant_us(10_753_000_000)
    '1970-01-01T02:59:13+00:00'
    >>> parse_instant_us(format_instant_us(1_500_000))
    1500000
    """
    return datetime.fromtimestamp(us / US_PER_SECOND, UTC).isoformat()
