"""Declared sources: a stream of one's own, described once in the settings' TOML.

A declaration says how a file's (or a Kafka record's) fields become bronze's columns: the format,
which field gives the stream (or one constant stream), the key, the event time and its unit, the
arrival order, the value columns the operators read (``x``, ``y``, ``z``, ``value``; top-k scores
one of them) and the extra attributes kept in ``attrs``. Standard library only: the settings (and
so the DAG files, at parse time) build declarations; :mod:`outoforder.sources.declared` reads data
with them.

>>> d = parse_declaration("plant", {
...     "format": "csv", "key": "sensor", "stream": {"column": "line", "values": ["press", "oven"]},
...     "event_time": {"column": "ts", "unit": "ms"}, "values": {"value": "temp"},
... })
>>> d.columns_used(), d.streams
(('line', 'sensor', 'ts', 'temp'), ('press', 'oven'))
>>> d.event_time.to_us_factor()
1000

A declaration that cannot work fails here, naming the key:

>>> parse_declaration("plant", {"format": "xml"})
Traceback (most recent call last):
...
outoforder.errors.ConfigError: sources.plant.format: 'xml' is not one of csv, jsonl, parquet
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from outoforder.errors import ConfigError

FORMATS = ("csv", "jsonl", "parquet")
# epoch units and how many of them make a microsecond (negative: divide)
EPOCH_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": -1_000}
TIME_UNITS = (*EPOCH_UNITS, "iso8601")
VALUE_COLUMNS = ("x", "y", "z", "value")
GEO_COLUMNS = ("lat", "lon")  # degrees, projected to metres in x and y about the declared origin
VALUE_FIELDS = (*VALUE_COLUMNS, *GEO_COLUMNS)  # what ``values`` may map (and ``ranges`` bound)
GEO_BOUNDS = {"lat": (-90.0, 90.0), "lon": (-180.0, 180.0)}
DEFAULT_MAX_CLOCK_SKEW_S = 300.0  # an arrival may precede its event time by this much (clocks differ)
ARRIVAL_ORDER = "order"  # arrival = "order": the file's line order (a topic's log order)
ALL_OTHERS = "*"
# event times outside are quarantined as implausible unless the declaration says otherwise: a wrong
# unit (ms read as s) lands far outside
DEFAULT_PLAUSIBLE_US = (946_684_800_000_000, 4_102_444_800_000_000)  # 2000-01-01 .. 2100-01-01


@dataclass(frozen=True)
class TimeField:
    """A timestamp field: its column and unit (epoch s/ms/us/ns, or ISO 8601).

    ``timezone`` applies to ISO 8601 values that carry no offset; without it such a value is
    quarantined (``bad_timestamp``), since guessing a zone would shift every delay silently.
    """

    column: str
    unit: str
    timezone: str = ""

    def to_us_factor(self) -> int:
        """Multiply by this (or, if negative, floor-divide by its opposite) to get µs."""
        return EPOCH_UNITS[self.unit]


@dataclass(frozen=True)
class Declaration:
    """How one declared source's records become bronze rows (see the module docstring)."""

    name: str
    format: str
    key: str
    event_time: TimeField
    stream: str = ""  # a constant stream name ...
    stream_column: str = ""  # ... or the field holding it (exactly one of the two)
    streams: tuple[str, ...] = ()  # every stream the source may hold (other values are quarantined)
    arrival: TimeField | None = None  # None: arrival order is the file's line order
    values: Mapping[str, str] = field(default_factory=dict)  # bronze column -> field
    attrs: tuple[str, ...] = ()  # ("*",): every field not used above
    delimiter: str = ","
    quote: str = '"'
    header: bool = True
    columns: tuple[str, ...] = ()  # csv without a header: the fields' names, in order
    null_values: tuple[str, ...] = ("",)
    plausible_event_us: tuple[int, int] = DEFAULT_PLAUSIBLE_US
    topic: str = ""  # a Kafka topic to ingest (stages/ingest/kafka.py); "" for a source of files
    decimal: str = "."  # a text number's decimal separator ("," for 3,99) ...
    thousands: str = ""  # ... and its digit-group separator, if any ("." for 1.234,5)
    origin: tuple[float, float] | None = None  # (lat, lon) in degrees: x/y are metres east/north of it
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # values field -> [lo, hi]
    max_clock_skew_s: float = DEFAULT_MAX_CLOCK_SKEW_S

    @property
    def max_clock_skew_us(self) -> int:
        """How far an arrival time may precede its event time, in µs."""
        return int(self.max_clock_skew_s * 1_000_000)

    def bounds(self, target: str) -> tuple[float, float] | None:
        """The range a values field must lie in (a latitude's and longitude's own, narrowed by ``ranges``)."""
        lo, hi = GEO_BOUNDS.get(target, (-math.inf, math.inf))
        if target in self.ranges:
            lo, hi = max(lo, self.ranges[target][0]), min(hi, self.ranges[target][1])
        return None if (lo, hi) == (-math.inf, math.inf) else (lo, hi)

    def columns_used(self) -> tuple[str, ...]:
        """Every field the declaration reads, in a stable order (attrs' ``*`` not expanded)."""
        used = [self.stream_column, self.key, self.event_time.column]
        used += [self.arrival.column] if self.arrival else []
        used += [self.values[c] for c in VALUE_FIELDS if c in self.values]
        used += [a for a in self.attrs if a != ALL_OTHERS]
        return tuple(dict.fromkeys(c for c in used if c))

    def as_dict(self) -> dict[str, Any]:
        """The declaration as plain JSON-able values (what Spark tasks receive, inside a reader's spec)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Declaration:
        """The inverse of :meth:`as_dict` (after a JSON round trip: lists for tuples)."""
        raw = dict(values)
        raw["event_time"] = TimeField(**raw["event_time"])
        raw["arrival"] = TimeField(**raw["arrival"]) if raw["arrival"] else None
        for name in ("attrs", "columns", "null_values", "streams"):
            raw[name] = tuple(raw[name])
        raw["plausible_event_us"] = tuple(raw["plausible_event_us"])
        raw["origin"] = tuple(raw["origin"]) if raw["origin"] else None
        raw["ranges"] = {k: (float(v[0]), float(v[1])) for k, v in raw["ranges"].items()}
        return cls(**raw)


_KEYS = {
    "format", "key", "event_time", "stream", "arrival", "values", "attrs", "delimiter", "quote", "header",
    "columns", "null_values", "plausible_event_us", "topic", "decimal", "thousands", "origin", "ranges",
    "max_clock_skew_s",
}  # fmt: skip


def _fail(name: str, key: str, why: str) -> ConfigError:
    return ConfigError(f"sources.{name}.{key}: {why}")


def _time(name: str, key: str, raw: object) -> TimeField:
    if not isinstance(raw, Mapping):
        raise _fail(name, key, 'expected a table like { column = "ts", unit = "ms" }')
    unknown = set(raw) - {"column", "unit", "timezone"}
    if unknown:
        raise _fail(name, key, f"unknown keys {sorted(unknown)}; known: column, unit, timezone")
    column, unit = raw.get("column"), raw.get("unit")
    if not isinstance(column, str) or not column:
        raise _fail(name, f"{key}.column", "the field holding the time is required")
    if unit not in TIME_UNITS:
        raise _fail(name, f"{key}.unit", f"{unit!r} is not one of {', '.join(TIME_UNITS)}")
    tz = raw.get("timezone", "")
    if not isinstance(tz, str):
        raise _fail(name, f"{key}.timezone", "expected a zone name such as 'UTC' or 'Europe/Paris'")
    if tz:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise _fail(name, f"{key}.timezone", f"unknown time zone {tz!r}") from e
        if unit != "iso8601":
            raise _fail(name, f"{key}.timezone", "only applies to unit = 'iso8601'")
    return TimeField(column, str(unit), tz)


def _strings(name: str, key: str, raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple) or not all(isinstance(v, str) for v in raw):
        raise _fail(name, key, "expected a list of strings")
    return tuple(raw)


def _number(name: str, key: str, raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise _fail(name, key, f"a finite number, got {raw!r}")
    return float(raw)


def _origin(name: str, values: Mapping[str, str], raw: object) -> tuple[float, float] | None:
    geo = [c for c in GEO_COLUMNS if c in values]
    if not geo:
        if raw is not None:
            raise _fail(name, "origin", "only with values' lat and lon (a position in degrees)")
        return None
    if len(geo) != 2 or "x" in values or "y" in values:
        raise _fail(name, "values", "lat and lon come together, and instead of x and y (they become x and y)")
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise _fail(
            name, "origin", "required with lat and lon: [lat, lon] in degrees near the data, e.g. "
            "[52.52, 13.40]; x and y become metres east and north of it"
        )  # fmt: skip
    lat, lon = _number(name, "origin", raw[0]), _number(name, "origin", raw[1])
    if not (-85 <= lat <= 85 and -180 <= lon <= 180):
        raise _fail(name, "origin", f"[{lat}, {lon}]: latitude in [-85, 85], longitude in [-180, 180]")
    return lat, lon


def _ranges(name: str, values: Mapping[str, str], raw: object) -> dict[str, tuple[float, float]]:
    if not isinstance(raw, Mapping):
        raise _fail(name, "ranges", "expected a table like { value = [-40, 60] }")
    out: dict[str, tuple[float, float]] = {}
    for target, bounds in raw.items():
        if target not in values:
            known = ", ".join(values) or "none"
            raise _fail(name, f"ranges.{target}", f"not a field of values (declared: {known})")
        if not isinstance(bounds, list | tuple) or len(bounds) != 2:
            raise _fail(name, f"ranges.{target}", "expected [lower, upper]")
        lo, hi = (_number(name, f"ranges.{target}", b) for b in bounds)
        if not lo <= hi:
            raise _fail(name, f"ranges.{target}", f"lower {lo} > upper {hi}")
        out[str(target)] = (lo, hi)
    return out


def _separators(name: str, decimal: object, thousands: object) -> tuple[str, str]:
    if decimal not in (".", ","):
        raise _fail(name, "decimal", f'"." or ",", got {decimal!r}')
    if thousands not in ("", ".", ",", " ", "'", "\u00a0", "\u202f") or thousands == decimal:
        raise _fail(
            name, "thousands", f"none, or one of . , ' and a space, not the decimal; got {thousands!r}"
        )
    return str(decimal), str(thousands)


def parse_declaration(name: str, raw: Mapping[str, Any]) -> Declaration:
    """A declaration from its TOML table ``[sources.<name>]``; every mistake names its key."""
    if not name or "/" in name or name.strip() != name:
        msg = f"sources.{name}: a source name must be non-empty, without '/' or surrounding blanks"
        raise ConfigError(msg)
    unknown = set(raw) - _KEYS
    if unknown:
        raise _fail(name, sorted(unknown)[0], f"unknown key; known: {', '.join(sorted(_KEYS))}")
    fmt = raw.get("format")
    if fmt not in FORMATS:
        raise _fail(name, "format", f"{fmt!r} is not one of {', '.join(FORMATS)}")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise _fail(name, "key", "the field holding the key (a sensor, device, player...) is required")
    if "event_time" not in raw:
        raise _fail(name, "event_time", 'required, e.g. { column = "ts", unit = "ms" }')
    event_time = _time(name, "event_time", raw["event_time"])
    stream_raw = raw.get("stream")
    stream, stream_column = "", ""
    streams: tuple[str, ...] = ()
    if isinstance(stream_raw, str) and stream_raw:
        stream, streams = stream_raw, (stream_raw,)
    elif isinstance(stream_raw, Mapping) and set(stream_raw) == {"column", "values"} and stream_raw["column"]:
        stream_column = str(stream_raw["column"])
        streams = _strings(name, "stream.values", stream_raw["values"])
        if not streams:
            raise _fail(name, "stream.values", "list at least one stream name")
    else:
        raise _fail(
            name, "stream", 'a constant stream name, or { column = "kind", values = ["a", "b"] }: the field '
            "holding it and the stream names it may hold (other values are quarantined)"
        )  # fmt: skip
    arrival_raw = raw.get("arrival", ARRIVAL_ORDER)
    arrival = None if arrival_raw == ARRIVAL_ORDER else _time(name, "arrival", arrival_raw)
    values_raw = raw.get("values", {})
    if not isinstance(values_raw, Mapping):
        raise _fail(name, "values", 'expected a table like { value = "temperature", x = "lon" }')
    bad = set(values_raw) - set(VALUE_FIELDS)
    if bad:
        raise _fail(
            name, "values", f"{sorted(bad)}: bronze's value columns are {', '.join(VALUE_COLUMNS)}, "
            "or lat and lon (degrees, projected to metres in x and y)"
        )  # fmt: skip
    values = {str(k): str(v) for k, v in values_raw.items()}
    origin = _origin(name, values, raw.get("origin"))
    ranges = _ranges(name, values, raw.get("ranges", {}))
    decimal, thousands = _separators(name, raw.get("decimal", "."), raw.get("thousands", ""))
    skew = raw.get("max_clock_skew_s", DEFAULT_MAX_CLOCK_SKEW_S)
    if isinstance(skew, bool) or not isinstance(skew, int | float) or not 0 <= skew <= 1e9:
        raise _fail(name, "max_clock_skew_s", f"seconds in [0, 1e9], got {skew!r}")
    attrs = _strings(name, "attrs", raw.get("attrs", []))
    delimiter, quote = raw.get("delimiter", ","), raw.get("quote", '"')
    if fmt == "csv":
        if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n":
            raise _fail(name, "delimiter", f"one character, got {delimiter!r}")
        if not isinstance(quote, str) or len(quote) != 1 or quote == delimiter:
            raise _fail(name, "quote", f"one character other than the delimiter, got {quote!r}")
    header = raw.get("header", True)
    if not isinstance(header, bool):
        raise _fail(name, "header", f"true or false, got {header!r}")
    columns = _strings(name, "columns", raw.get("columns", []))
    if fmt == "csv" and not header and not columns:
        raise _fail(name, "columns", "a CSV without a header needs its fields' names, in order")
    if len(set(columns)) != len(columns):
        raise _fail(name, "columns", "names must be unique")
    plausible = raw.get("plausible_event_us")
    bounds = DEFAULT_PLAUSIBLE_US
    if plausible is not None:
        if not isinstance(plausible, list | tuple) or len(plausible) != 2 or not plausible[0] < plausible[1]:
            raise _fail(name, "plausible_event_us", "expected [lower, upper] with lower < upper (µs)")
        bounds = (int(plausible[0]), int(plausible[1]))
    topic = raw.get("topic", "")
    if not isinstance(topic, str):
        raise _fail(name, "topic", f"a Kafka topic's name, got {topic!r}")
    if topic:
        if fmt == "parquet" or (fmt == "csv" and header):
            raise _fail(
                name,
                "format",
                'a Kafka record is one line: "jsonl", or "csv" with header = false and columns',
            )
        if arrival is not None:
            raise _fail(
                name, "arrival", "a topic's arrival order is its log's (log-append time, partition, offset): "
                'leave arrival out or set it to "order"'
            )  # fmt: skip
    decl = Declaration(
        name=name, format=str(fmt), key=key, event_time=event_time, stream=stream,
        stream_column=stream_column, streams=streams, arrival=arrival, values=values, attrs=attrs,
        delimiter=str(delimiter), quote=str(quote), header=header, columns=columns,
        null_values=_strings(name, "null_values", raw.get("null_values", [""])), plausible_event_us=bounds,
        topic=topic, decimal=decimal, thousands=thousands, origin=origin, ranges=ranges,
        max_clock_skew_s=float(skew),
    )  # fmt: skip
    if columns:
        missing = [c for c in decl.columns_used() if c not in columns]
        if missing:
            raise _fail(name, "columns", f"{missing} are used but not among the declared columns")
    return decl


def parse_declarations(raw: Mapping[str, Any]) -> dict[str, Declaration]:
    """Every ``[sources.<name>]`` table."""
    out: dict[str, Declaration] = {}
    for name, table in raw.items():
        if not isinstance(table, Mapping):
            msg = f"sources.{name}: expected a table ([sources.{name}])"
            raise ConfigError(msg)
        out[str(name)] = parse_declaration(str(name), table)
    return out
