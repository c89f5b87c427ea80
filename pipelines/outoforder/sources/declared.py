"""The reader of a declared source (:mod:`outoforder.sources.declaration`): CSV, JSON lines, Parquet.

One record per line: a CSV record may not span lines (a quoted field holding a line break is
read as two broken lines, both quarantined). A Parquet file's rows arrive as JSON objects
(:func:`~outoforder.sources.lines.read_parquet_batches`) and are read by the JSON rules.

:meth:`DeclaredReader.parse` is the definition of how a line becomes a
:class:`~outoforder.sources.readers.Row` or a quarantined line; every reason it gives names the
field at fault in its detail (``column 'temp': 'n/a'``). Reasons: ``column_count``, ``not_json``,
``null_key``, ``null_stream``, ``unknown_stream``, ``null_timestamp``, ``not_numeric``,
``non_finite_value``, ``bad_timestamp``; the shared line driver adds the others
(``duplicate_row``, ``implausible_timestamp``, ``encoding``, ...).

:meth:`DeclaredReader.parse_fast` decides in bulk the lines whose fields are all in a strict
canonical form, giving exactly what :meth:`parse` gives them: CSV fields split by Arrow kernels,
JSON objects read by Arrow's JSON reader. Every other line takes the per-line path
(``tests/sources/test_declared.py`` holds the two together).

Times are read as :mod:`outoforder.sources.fields` says: exact decimals since the epoch, or ISO
8601 with an offset (or the declaration's ``timezone``).

>>> from outoforder.sources.declaration import parse_declaration
>>> d = parse_declaration("plant", {
...     "format": "csv", "header": False, "columns": ["sensor", "ts", "temp", "site"],
...     "stream": "sensors", "key": "sensor", "event_time": {"column": "ts", "unit": "ms"},
...     "values": {"value": "temp"}, "attrs": ["site"],
... })
>>> row = DeclaredReader(d).parse("s1,1700000000123,21.5,north")
>>> row.key, row.event_us, row.value, dict(row.attrs)
('s1', 1700000000123000, 21.5, {'site': 'north'})
>>> DeclaredReader(d).parse("s1,yesterday,21.5,north")
Traceback (most recent call last):
...
outoforder.sources.readers.Reject: ('not_numeric', "column 'ts': 'yesterday'")
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from outoforder.errors import ConfigError, InputError
from outoforder.sources.arrow_json import as_mask, is_text, json_fields
from outoforder.sources.declaration import ALL_OTHERS, VALUE_COLUMNS, VALUE_FIELDS, Declaration, TimeField
from outoforder.sources.fields import bad_field, epoch_to_us, iso_to_us, json_path, json_text, shown
from outoforder.sources.geo import LocalProjection
from outoforder.sources.readers import INT64_MAX, READERS, Reader, Reject, Row

# the fast path's canonical forms: what Arrow's casts and Python's parsers read as the same value
_FAST_INT = r"^(0|-?[1-9][0-9]{0,17})$"
_FAST_FLOAT = r"^-?(0|[1-9][0-9]{0,17})(\.[0-9]{1,17})?([eE][-+]?[0-9]{1,3})?$"
_FAST_ISO = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?"
    r"(Z|[-+]([01][0-9]|2[0-3]):[0-5][0-9])$"
)


class DeclaredReader:
    """Reads the lines of one declared source; ``fields`` are a CSV file's column names in order.

    For a CSV with a header, ``fields`` come from that file's first line (:func:`bind`); for a
    CSV without one, from the declaration's ``columns``; JSON lines name their fields themselves.
    """

    def __init__(self, decl: Declaration, fields: Sequence[str] | None = None) -> None:
        self.decl = decl
        self.name = decl.name
        if decl.format == "csv":
            names = tuple(fields) if fields is not None else decl.columns
            if not names:
                msg = f"source {decl.name!r}: a CSV reader needs the file's column names"
                raise InputError(msg)
            self.fields: tuple[str, ...] = names
        else:
            self.fields = tuple(fields or ())
        self.index = {c: i for i, c in enumerate(self.fields)}
        self.zones = {f.column: ZoneInfo(f.timezone) if f.timezone else None for f in self._times()}

    def _times(self) -> list[TimeField]:
        return [self.decl.event_time, *([self.decl.arrival] if self.decl.arrival else [])]

    @cached_property
    def attr_columns(self) -> tuple[str, ...]:
        """The fields kept in ``attrs``; with ``*``, every field of the file not used otherwise."""
        if ALL_OTHERS not in self.decl.attrs:
            return self.decl.attrs
        used = set(self.decl.columns_used())
        listed = [a for a in self.decl.attrs if a != ALL_OTHERS]
        return tuple(dict.fromkeys([*listed, *(c for c in self.fields if c not in used)]))

    @cached_property
    def number_form(self) -> re.Pattern[str] | None:
        """A text number with the declared separators (None: Python's own form, ``3.99``)."""
        d = self.decl
        if d.decimal == "." and not d.thousands:
            return None
        grouped = f"[0-9]{{1,3}}(?:{re.escape(d.thousands)}[0-9]{{3}})+|" if d.thousands else ""
        digits = f"(?:{grouped}[0-9]+)"
        return re.compile(f"[-+]?{digits}(?:{re.escape(d.decimal)}[0-9]+)?(?:[eE][-+]?[0-9]+)?", re.ASCII)

    def _plain(self, text: str) -> str:
        """A number in the declared form, in Python's (``1.234,5`` -> ``1234.5``)."""
        d = self.decl
        return (text.replace(d.thousands, "") if d.thousands else text).replace(d.decimal, ".")

    def _plain_numbers(self, values: pa.Array) -> pa.Array:
        """:meth:`_plain` over an array of text."""
        d = self.decl
        if d.thousands:
            values = pc.replace_substring(values, d.thousands, "")
        return pc.replace_substring(values, d.decimal, ".")

    @cached_property
    def projection(self) -> LocalProjection | None:
        """Latitude and longitude to metres in x and y, when the declaration maps both."""
        return LocalProjection(*self.decl.origin) if self.decl.origin else None

    def spec(self) -> str:
        """The reader as one string: what Spark tasks receive (:func:`make_reader` reads it)."""
        return json.dumps({"declaration": self.decl.as_dict(), "fields": list(self.fields)})

    @classmethod
    def from_spec(cls, text: str) -> DeclaredReader:
        """The inverse of :meth:`spec`."""
        raw = json.loads(text)
        return cls(Declaration.from_dict(raw["declaration"]), raw["fields"])

    def is_header(self, text: str) -> bool:
        """A CSV declared with a header always starts with it."""
        return self.decl.format == "csv" and self.decl.header

    # --- per-line path: the definition -------------------------------------------------------

    def _record(self, text: str) -> Callable[[str], Any]:
        """A lookup of the line's fields by name (None when absent)."""
        if self.decl.format == "csv":
            try:
                f = next(csv.reader([text], delimiter=self.decl.delimiter, quotechar=self.decl.quote))
            except (csv.Error, StopIteration) as e:
                raise Reject("column_count", f"unparseable quoting: {e}") from e
            if len(f) != len(self.fields):
                raise Reject("column_count", f"{len(f)} columns, expected {len(self.fields)}")
            return lambda name: f[self.index[name]]
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise Reject("not_json", str(e)[:120]) from e
        if not isinstance(obj, dict):
            raise Reject("not_json", f"a JSON {type(obj).__name__}, not an object")
        return lambda name: json_path(obj, name)

    def _null(self, value: Any) -> bool:
        return value is None or (isinstance(value, str) and value.strip() in self.decl.null_values)

    def _string(self, get: Callable[[str], Any], column: str, reason: str) -> str:
        value = get(column)
        if self._null(value):
            raise bad_field(reason, column, " is empty")
        return value.strip() if isinstance(value, str) else json_text(value)

    def _time(self, get: Callable[[str], Any], f: TimeField) -> int:
        value = get(f.column)
        if self._null(value):
            raise bad_field("null_timestamp", f.column, " is empty")
        if f.unit == "iso8601":
            return iso_to_us(value, f, self.zones[f.column])
        return epoch_to_us(value, f)

    def _number(self, get: Callable[[str], Any], column: str) -> float | None:
        value = get(column)
        if self._null(value):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad_field("not_numeric", column, f": {shown(json_text(value))}")
        if isinstance(value, str) and self.number_form is not None:
            text = value.strip()
            if not self.number_form.fullmatch(text):
                try:
                    finite = math.isfinite(float(text))
                except ValueError:
                    finite = True
                if not finite:
                    raise bad_field("non_finite_value", column, f": {shown(value)}")
                d = self.decl
                form = f"decimal {d.decimal!r}" + (f", thousands {d.thousands!r}" if d.thousands else "")
                raise bad_field("not_numeric", column, f": {shown(value)} (declared {form})")
            value = self._plain(text)
        try:
            number = float(value)
        except (ValueError, OverflowError) as e:
            raise bad_field("not_numeric", column, f": {shown(str(value))}") from e
        if not math.isfinite(number):
            raise bad_field("non_finite_value", column, f": {shown(str(value))}")
        return number

    def parse(self, text: str) -> Row:
        """Parse one line or raise :class:`~outoforder.sources.readers.Reject`."""
        get = self._record(text)
        d = self.decl
        stream = d.stream
        if d.stream_column:
            stream = self._string(get, d.stream_column, "null_stream")
            if stream not in d.streams:
                raise bad_field(
                    "unknown_stream", d.stream_column, f": {shown(stream)} is not a declared stream"
                )
        key = self._string(get, d.key, "null_key")
        event = self._time(get, d.event_time)
        arrival = self._time(get, d.arrival) if d.arrival else None
        if d.arrival and arrival is not None and event - arrival > d.max_clock_skew_us:
            raise bad_field(
                "arrival_before_event", d.arrival.column, f": {(event - arrival) / 1e6:g} s before the "
                f"event time, more than max_clock_skew_s = {d.max_clock_skew_s:g} (a sender's clock? a unit?)"
            )  # fmt: skip
        nums = {c: self._number(get, d.values[c]) for c in VALUE_FIELDS if c in d.values}
        for c, number in nums.items():
            bounds = d.bounds(c)
            if number is not None and bounds is not None and not bounds[0] <= number <= bounds[1]:
                lo, hi = bounds
                raise bad_field("out_of_range", d.values[c], f": {number:g} is outside [{lo:g}, {hi:g}]")
        if self.projection is not None:
            lat, lon = nums.pop("lat"), nums.pop("lon")
            at = None if lat is None or lon is None else self.projection.point(lat, lon)
            nums["x"], nums["y"] = at if at is not None else (None, None)
        nums = {c: nums.get(c) for c in VALUE_COLUMNS}
        attrs: dict[str, str] = {}
        for name in self.attr_columns:
            value = get(name)
            if not self._null(value):
                attrs[name] = value if isinstance(value, str) else json_text(value)
        return Row(stream, key, event, arrival, nums["x"], nums["y"], nums["z"], nums["value"], attrs)

    # --- vectorised path ----------------------------------------------------------------------

    def parse_fast(self, texts: pa.Array) -> tuple[npt.NDArray[np.bool_], dict[str, pa.Array]]:
        """(which lines the bulk path decides, their columns): exactly the rows :meth:`parse` gives them.

        CSV fields are split with Arrow kernels; JSON objects (JSON lines, Parquet rows, Kafka
        payloads) are read by Arrow's JSON reader
        (:func:`~outoforder.sources.arrow_json.json_fields`). Either way a line is
        decided here only when every field it uses is in a canonical form whose value both paths
        read alike; the others are left to :meth:`parse`.
        """
        n = len(texts)
        if n == 0:
            return np.zeros(0, dtype=bool), {}
        if self.decl.format == "csv":
            ok, col = self._csv_fields(texts)
        else:
            found = json_fields(texts, self._json_paths())
            if found is None:
                return np.zeros(n, dtype=bool), {}
            ok, col = found
        return self._fast_rows(texts, ok, col)

    def _csv_fields(self, texts: pa.Array) -> tuple[npt.NDArray[np.bool_], Callable[[str], pa.Array]]:
        d = self.decl
        parts = pc.split_pattern(texts, d.delimiter)
        nf = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
        ok = nf == len(self.fields)
        ok &= ~as_mask(pc.match_substring(texts, d.quote))
        offs = parts.offsets.to_numpy()[:-1].astype(np.int64)
        flat = pc.list_flatten(parts)

        def col(name: str) -> pa.Array:
            return flat.take(pa.array(np.where(ok, offs + self.index[name], 0)))

        return ok, col

    def _json_paths(self) -> dict[str, str]:
        """The fields a JSON record is read for, and their roles: ``value``, ``epoch``, ``iso``, ``text``."""
        d = self.decl
        roles = dict.fromkeys((*d.columns_used(), *self.attr_columns), "text")
        for f in self._times():
            roles[f.column] = "iso" if f.unit == "iso8601" else "epoch"
        roles |= dict.fromkeys(d.values.values(), "value")
        return roles

    def _fast_rows(
        self, texts: pa.Array, ok: npt.NDArray[np.bool_], col: Callable[[str], pa.Array]
    ) -> tuple[npt.NDArray[np.bool_], dict[str, pa.Array]]:
        """The rows of the lines in ``ok`` whose used fields are canonical; ``col(name)``: a field's values.

        A field is text (CSV, or a JSON string), an integer or a float (JSON numbers), or null
        (absent). Each is decided only where :meth:`parse` reads it the same: text in the strict
        canonical forms, integers exactly, finite floats for values; anything else is left.
        """
        n = len(texts)
        d = self.decl
        nulls = pa.array(list(d.null_values), pa.string())

        def is_null(values: pa.Array) -> npt.NDArray[np.bool_]:
            missing = as_mask(values.is_null())
            if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
                missing |= as_mask(pc.fill_null(pc.is_in(pc.utf8_trim(values, " "), value_set=nulls), False))
            return missing

        def strict(values: pa.Array, pattern: str) -> npt.NDArray[np.bool_]:
            return as_mask(pc.fill_null(pc.match_substring_regex(values, pattern), False))

        def text(values: pa.Array) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], pa.Array]:
            """(where :meth:`parse` reads the field as this text, where it holds a value, the text).

            Strings are themselves and integers their digits; any other value is left per line.
            """
            if pa.types.is_integer(values.type):
                present = ~as_mask(values.is_null())
                return np.ones(n, dtype=bool), present, values.cast(pa.string())
            if not is_text(values.type):
                absent = as_mask(values.is_null())
                return absent, ~absent, pa.nulls(n, pa.string())
            return np.ones(n, dtype=bool), ~is_null(values), values

        cols: dict[str, pa.Array] = {}  # in the staged rows' column order
        if not d.stream_column:
            cols["stream"] = pa.array(np.full(n, d.stream, dtype=object), pa.string())
        for target, name in (("stream", d.stream_column), ("key", d.key)):
            if not name:
                continue
            usable, present, values = text(col(name))
            ok &= usable & present & as_mask(pc.fill_null(pc.equal(values, pc.utf8_trim(values, " ")), False))
            if target == "stream":
                ok &= as_mask(pc.fill_null(pc.is_in(values, value_set=pa.array(list(d.streams))), False))
            cols[target] = values
        for target, f in (("event_ts", d.event_time), ("arrival_ts", d.arrival)):
            if f is None:
                cols[target] = pa.nulls(n, pa.int64())
                continue
            ok, cols[target] = self._fast_time(col(f.column), f, ok, is_null, strict)
            if not ok.any():
                return ok, {}
        if d.arrival is not None:
            event = cols["event_ts"].to_numpy(zero_copy_only=False)
            arrival = cols["arrival_ts"].to_numpy(zero_copy_only=False)
            ok &= event - arrival <= d.max_clock_skew_us
        nums: dict[str, tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]] = {}
        for target in VALUE_FIELDS:
            if target not in d.values:
                continue
            values = col(d.values[target])
            missing = is_null(values)
            if pa.types.is_floating(values.type) or pa.types.is_integer(values.type):
                got = values.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
            elif is_text(values.type):
                if self.number_form is not None:  # declared separators: their form, then Python's
                    ok &= missing | strict(values, f"^{self.number_form.pattern}$")
                    values = self._plain_numbers(values)
                ok &= missing | strict(values, _FAST_FLOAT)
                safe = pc.if_else(pa.array(missing | ~ok), "0", values)
                got = pc.cast(safe, pa.float64()).to_numpy(zero_copy_only=False)
            else:
                ok &= missing
                got = np.zeros(n)
            ok &= missing | np.isfinite(got)
            bounds = d.bounds(target)
            if bounds is not None:
                ok &= missing | ((got >= bounds[0]) & (got <= bounds[1]))
            nums[target] = (np.where(missing, 0.0, got), missing)
        if self.projection is not None:
            (lat, lat_missing), (lon, lon_missing) = nums.pop("lat"), nums.pop("lon")
            missing = lat_missing | lon_missing
            x, y = self.projection.xy(np.where(missing, self.projection.lat0, lat), lon)
            nums["x"], nums["y"] = (x, missing), (y, missing)
        for target in VALUE_COLUMNS:
            if target in nums:
                got, missing = nums[target]
                cols[target] = pa.array(np.where(missing, 0.0, got), mask=missing)
            else:
                cols[target] = pa.nulls(n, pa.float64())
        attrs = []
        for name in self.attr_columns:
            usable, present, values = text(col(name))
            ok &= usable
            attrs.append((values, present))
        cols["attrs"] = self._fast_attrs(attrs, n)
        taken = pa.array(np.flatnonzero(ok))
        return ok, {name: values.take(taken) for name, values in cols.items()}

    @staticmethod
    def _fast_time(
        values: pa.Array,
        f: TimeField,
        ok: npt.NDArray[np.bool_],
        is_null: Callable[[pa.Array], npt.NDArray[np.bool_]],
        strict: Callable[[pa.Array, str], npt.NDArray[np.bool_]],
    ) -> tuple[npt.NDArray[np.bool_], pa.Array]:
        """(``ok`` narrowed to the lines whose time is canonical, the times in µs)."""
        n = len(values)
        ok = ok & ~is_null(values)
        if f.unit == "iso8601":
            if not is_text(values.type):
                return np.zeros(n, dtype=bool), pa.nulls(n, pa.int64())
            ok &= strict(values, _FAST_ISO)
            safe = pc.if_else(pa.array(ok), values, "1970-01-01T00:00:00Z")
            try:
                us = (
                    pc.cast(safe, pa.timestamp("us", tz="UTC"))
                    .cast(pa.int64())
                    .to_numpy(zero_copy_only=False)
                )
            except pa.ArrowInvalid:  # an impossible date among them: every line takes the per-line path
                return np.zeros(n, dtype=bool), pa.nulls(n, pa.int64())
            return ok, pa.array(us)
        if pa.types.is_integer(values.type):
            raw = values.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        elif is_text(values.type):
            ok &= strict(values, _FAST_INT)
            raw = pc.cast(pc.if_else(pa.array(ok), values, "0"), pa.int64()).to_numpy()
        else:  # a JSON float: its exact decimal is the per-line path's to find
            return np.zeros(n, dtype=bool), pa.nulls(n, pa.int64())
        factor = f.to_us_factor()
        if factor > 0:
            bound = INT64_MAX // factor
            ok &= (raw >= -bound) & (raw <= bound)
            us = np.where(ok, raw, 0) * factor
        else:
            us = raw // -factor
        return ok, pa.array(us)

    def _fast_attrs(self, attrs: list[tuple[pa.Array, npt.NDArray[np.bool_]]], n: int) -> pa.Array:
        """The ``attrs`` maps from each attribute's (text, where present), in declaration order."""
        names = self.attr_columns
        if not names:
            empty = pa.array([], pa.string())
            return pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), empty, empty)
        present = np.stack([p for _, p in attrs], axis=1)  # rows x attrs
        offsets = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int32)
        keys = np.tile(np.array(names, dtype=object), n)[present.ravel()]
        interleaved = pa.concat_arrays([v.cast(pa.string()) for v, _ in attrs])
        order = (np.arange(len(names))[None, :] * n + np.arange(n)[:, None]).ravel()[present.ravel()]
        return pa.MapArray.from_arrays(
            pa.array(offsets), pa.array(keys, pa.string()), interleaved.take(pa.array(order, pa.int64()))
        )


def make_reader(name: str) -> Reader:
    """The reader registered under ``name``, or a declared source's (a ``DeclaredReader.spec()``)."""
    if name.startswith("{"):
        return DeclaredReader.from_spec(name)
    try:
        return READERS[name]()
    except KeyError as e:
        msg = f"unknown reader {name!r}; known: {', '.join(sorted(READERS))}"
        raise ConfigError(msg) from e
