"""One field of a declared record: found by name or JSON path, read as a time, rejected by name.

Times: epoch values are exact decimals (``1700000000.25`` s is 1 700 000 000 250 000 µs), floored
to the microsecond; ISO 8601 values need an offset (``Z``, ``+02:00``) unless the declaration gives
a ``timezone``. A field that cannot be read is a :class:`~outoforder.sources.readers.Reject` whose
detail names the field first (:func:`bad_field`), as every reason of
:class:`~outoforder.sources.declared.DeclaredReader` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from outoforder.sources.declaration import TimeField
from outoforder.sources.readers import INT64_MAX, Reject

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


_ONE_US = timedelta(microseconds=1)


_DECIMAL = re.compile(r"[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", re.ASCII)


def shown(text: str) -> str:
    """A field's text as a reject's detail shows it (quoted, at most 40 characters)."""
    return repr(text[:40])


def bad_field(reason: str, column: str, what: str) -> Reject:
    """A reject naming the field at fault first in its detail (``what``: what is wrong with it)."""
    return Reject(reason, f"column {column!r}{what}", column)


def epoch_to_us(value: Any, field: TimeField) -> int:
    """An epoch value (a decimal string or a JSON number) in ``field.unit`` to µs, floored.

    >>> epoch_to_us("1.5", TimeField("t", "s")), epoch_to_us(-1501, TimeField("t", "ns"))
    (1500000, -2)
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise bad_field("not_numeric", field.column, f": {shown(json_text(value))}")
    text = value.strip() if isinstance(value, str) else repr(value)
    if not _DECIMAL.fullmatch(text):
        why = "non_finite_value" if isinstance(value, float) else "not_numeric"
        raise bad_field(why, field.column, f": {shown(text)}")
    number = Decimal(text)
    if number.adjusted() > 20:  # beyond any int64 µs; never build the huge integer
        raise bad_field("not_numeric", field.column, f": out of the 64-bit range: {shown(text)}")
    factor = field.to_us_factor()
    scaled = number * factor if factor > 0 else number / -factor
    us = int(scaled.to_integral_value(rounding=ROUND_FLOOR))
    if not -INT64_MAX <= us <= INT64_MAX:
        raise bad_field("not_numeric", field.column, f": out of the 64-bit range: {shown(text)}")
    return us


def iso_to_us(value: Any, field: TimeField, zone: tzinfo | None) -> int:
    """An ISO 8601 date-time to µs since the epoch; without an offset, ``zone`` (or a reject)."""
    if not isinstance(value, str):
        raise bad_field("bad_timestamp", field.column, f": not an ISO 8601 string: {shown(str(value))}")
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError as e:
        raise bad_field("bad_timestamp", field.column, f": not ISO 8601: {shown(value)}") from e
    if parsed.tzinfo is None:
        if zone is None:
            raise bad_field(
                "bad_timestamp",
                field.column,
                f": no time zone in {shown(value)} (declare a timezone for it)",
            )
        parsed = parsed.replace(tzinfo=zone)
    return (parsed - _EPOCH) // _ONE_US


def json_path(obj: Mapping[str, Any], name: str) -> Any:
    """A JSON object's field, by name or, failing that, by a dotted path (``payload.temp``)."""
    if name in obj:
        return obj[name]
    node: Any = obj
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def json_text(value: Any) -> str:
    """A JSON value as the string bronze keeps (strings as they are, the rest as JSON)."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
