"""Readers for the project's datasets: a raw line in, a bronze row (or a reject with its reason) out.

A reader parses one line into a :class:`Row` or raises :class:`Reject` with a reason; the shared
line driver (:mod:`outoforder.sources.parsing`) adds what readers must not each get wrong (a
header, blank lines, duplicates, implausible timestamps, bounded batches). A reader may also
decide plain lines in bulk (``parse_fast``, exactly what ``parse`` gives them).

Quarantine reasons: ``column_count``, ``not_numeric``, ``non_finite_value``, ``null_key``,
``null_timestamp``, ``implausible_timestamp``, ``unknown_sensor``, ``duplicate_row``,
``encoding``, ``line_too_long``, ``corrupt_file``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from outoforder.core.time import ms_to_us, naive_utc_to_us, ps_to_us
from outoforder.sources.sensors import DEBS2013_STREAMS, SYNTHETIC_STREAMS


class Reject(Exception):
    """Raised by a reader's ``parse`` for a line that goes to quarantine."""

    def __init__(self, reason: str, detail: str = "", column: str = "") -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail
        self.column = column  # the field at fault, when one is (declared sources)


@dataclass(frozen=True)
class Row:
    """One accepted tuple, before it gets its arrival sequence number."""

    stream: str
    key: str
    event_us: int
    arrival_us: int | None = None
    x: float | None = None
    y: float | None = None
    z: float | None = None
    value: float | None = None
    attrs: Mapping[str, str] = field(default_factory=dict)


class Reader(Protocol):
    """Parses the lines of one file format."""

    @property
    def name(self) -> str:
        """The format's name (a built-in reader's, or a declared source's)."""
        ...

    def is_header(self, text: str) -> bool:
        """Whether line 1 is a header (never called for later lines)."""
        ...

    def parse(self, text: str) -> Row:
        """Parse one data line or raise :class:`Reject`."""
        ...


INT64_MAX = 2**63 - 1


def _int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError as e:
        raise Reject("not_numeric", f"{what}={text[:40]!r}") from e
    if not -INT64_MAX <= value <= INT64_MAX:
        raise Reject("not_numeric", f"{what} out of the 64-bit range: {text[:40]!r}")
    return value


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except (ValueError, OverflowError) as e:
        raise Reject("not_numeric", f"{what}={text[:40]!r}") from e
    if not math.isfinite(value):
        raise Reject("non_finite_value", f"{what}={text[:40]!r}")
    return value


@dataclass(frozen=True)
class Debs2013Reader:
    """DEBS 2013 Grand Challenge RTLS rows ``sid,ts,x,y,z,|v|,|a|,vx,vy,vz,ax,ay,az``.

    ts is in picoseconds (event_ts keeps µs), positions in mm (stored in metres as x, y, z),
    |v| in µm/s (stored in m/s as ``value``); the other fields are kept verbatim in ``attrs``.
    A 14th column, written by the disorder injector, is the arrival time in picoseconds.
    Sensor ids map to streams ball / team_a / team_b / referee (metadata.txt); others are
    quarantined as ``unknown_sensor`` unless ``sensor_streams`` names them.
    """

    name: ClassVar[str] = "debs2013"
    sensor_streams: Mapping[int, str] = field(default_factory=lambda: dict(DEBS2013_STREAMS))
    ATTRS: ClassVar[tuple[str, ...]] = ("a", "vx", "vy", "vz", "ax", "ay", "az")

    def is_header(self, text: str) -> bool:
        """The GitHub copy of full-game starts with ``sensor_id,time_stamp,...``."""
        return text.lstrip("\ufeff").lower().startswith(("sensor_id", "sid,"))

    def parse(self, text: str) -> Row:
        """Parse one RTLS row."""
        f = text.split(",")
        if len(f) in (14, 15) and f[-1] == "":
            f = f[:-1]  # one trailing delimiter is tolerated
        if len(f) not in (13, 14):
            raise Reject("column_count", f"{len(f)} columns, expected 13 (or 14 with arrival)")
        if not f[0].strip():
            raise Reject("null_key", "empty sensor id")
        if not f[1].strip():
            raise Reject("null_timestamp", "empty ts")
        sid = _int(f[0], "sid")
        ts = _int(f[1], "ts")
        x, y, z = (_int(v, n) / 1000.0 for v, n in zip(f[2:5], "xyz", strict=True))
        speed = _int(f[5], "v") / 1e6
        for v, n in zip(f[6:13], self.ATTRS, strict=True):
            _int(v, n)
        stream = self.sensor_streams.get(sid)
        if stream is None:
            raise Reject("unknown_sensor", f"sid={sid}")
        arrival = ps_to_us(_int(f[13], "arrival")) if len(f) == 14 else None
        return Row(
            stream,
            str(sid),
            ps_to_us(ts),
            arrival,
            x,
            y,
            z,
            speed,
            dict(zip(self.ATTRS, f[6:13], strict=True)),
        )

    def parse_fast(self, texts: pa.Array) -> tuple[npt.NDArray[np.bool_], dict[str, pa.Array]]:
        """The lines whose fields are all canonical integers and whose sensor is known, vectorised."""
        return _debs2013_fast(texts, self.sensor_streams, self.ATTRS)


OOO_COLUMNS = (
    "S.Message.received.time",
    "S.Message.received.time.ms",
    "S.Http.Content.Length",
    "S.Device.ID",
    "S.Message.ID",
    "S.Session.Name",
    "S.Client.Detection.Time",
    "S.Client.Network.Type",
    "S.Client.IP",
    "S.Client.Last.Clock.Synch.Time",
    "C.Device.ID",
    "C.Message.ID",
    "C.Send.Time",
    "C.Arrival.Time",
    "C.NTP.offset",
    "C.Server.Message.received.Time",
    "C.Server.Message.Processed.Time",
    "C.Server.Pocessing.duration.ns",
    "A.Duration.send",
    "A.Duration.receive",
    "A.Duration.round.trip",
    "A.ooo.Event.Client.Sequence",
    "A.ooo.Event.Sent.Time",
    "A.Time.to.previous.Client.sequence.detection.time",
    "A.Time.to.previous.Client.sequence.send.time",
    "A.Time.to.previous.Client.sequence.receive.time",
    "A.Time.to.previous.Server.Client.sequence.receive.time",
)


@dataclass(frozen=True)
class OooReader:
    """OoO-Dataset (Weiss et al., IoTBDS 2017) rows: ``;``-separated, quoted, 27 columns.

    event_ts = client detection time, arrival_ts = server receive time (file order is receive
    order), key = device id, value = HTTP content length; the other columns go to ``attrs``
    (``NA`` omitted). One stream, ``devices``: the disorder is mostly across devices.
    """

    name: ClassVar[str] = "ooo"
    stream: str = "devices"
    IDX: ClassVar[dict[str, int]] = {c: i for i, c in enumerate(OOO_COLUMNS)}

    def is_header(self, text: str) -> bool:
        """The first line names the columns."""
        return text.lstrip("\ufeff").startswith('"S.Message.received.time"')

    def parse(self, text: str) -> Row:
        """Parse one OoO row."""
        try:
            f = next(csv.reader([text], delimiter=";"))
        except csv.Error as e:
            raise Reject("column_count", f"unparseable quoting: {e}") from e
        if len(f) != len(OOO_COLUMNS):
            raise Reject("column_count", f"{len(f)} columns, expected {len(OOO_COLUMNS)}")
        i = self.IDX
        device = f[i["S.Device.ID"]].strip()
        if not device or device == "NA":
            raise Reject("null_key", "empty S.Device.ID")
        detect = f[i["S.Client.Detection.Time"]].strip()
        if not detect or detect == "NA":
            raise Reject("null_timestamp", "empty S.Client.Detection.Time")
        event = ms_to_us(_int(detect, "S.Client.Detection.Time"))
        arrival = ms_to_us(_int(f[i["S.Message.received.time.ms"]], "S.Message.received.time.ms"))
        length = _float(f[i["S.Http.Content.Length"]], "S.Http.Content.Length")
        keep = (
            "S.Device.ID",
            "S.Client.Detection.Time",
            "S.Message.received.time.ms",
            "S.Http.Content.Length",
        )
        attrs = {c: f[j] for c, j in i.items() if c not in keep and f[j] != "NA"}
        return Row(self.stream, device, event, arrival, None, None, None, length, attrs)


DEBS2015_COLUMNS = (
    "medallion",
    "hack_license",
    "pickup_datetime",
    "dropoff_datetime",
    "trip_time_in_secs",
    "trip_distance",
    "pickup_longitude",
    "pickup_latitude",
    "dropoff_longitude",
    "dropoff_latitude",
    "payment_type",
    "fare_amount",
    "surcharge",
    "mta_tax",
    "tip_amount",
    "tolls_amount",
    "total_amount",
)


@dataclass(frozen=True)
class Debs2015Reader:
    """DEBS 2015 Grand Challenge NYC taxi rows (17 columns, no header, drop-off order).

    event_ts = pickup time, arrival_ts = drop-off time (a trip is reported when it ends: the
    file's order), key = medallion, x/y = pickup longitude/latitude (0.0 means missing: null),
    value = fare amount; the rest goes to ``attrs``. Times are wall-clock, labelled UTC.
    """

    name: ClassVar[str] = "debs2015"
    stream: str = "taxi"
    NUMERIC: ClassVar[tuple[int, ...]] = (4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16)

    def is_header(self, text: str) -> bool:
        """Some copies carry a header naming the columns."""
        return text.lstrip("\ufeff").lower().startswith("medallion")

    def parse(self, text: str) -> Row:
        """Parse one taxi trip."""
        try:
            f = next(csv.reader([text]))  # quoted fields are legal CSV
        except csv.Error as e:
            raise Reject("column_count", f"unparseable quoting: {e}") from e
        if len(f) == len(DEBS2015_COLUMNS) + 1 and f[-1] == "":
            f = f[:-1]  # one trailing delimiter is tolerated
        if len(f) != len(DEBS2015_COLUMNS):
            raise Reject("column_count", f"{len(f)} columns, expected {len(DEBS2015_COLUMNS)}")
        if not f[0].strip():
            raise Reject("null_key", "empty medallion")
        if not f[2].strip() or not f[3].strip():
            raise Reject("null_timestamp", "empty pickup or dropoff time")
        try:
            pickup, dropoff = naive_utc_to_us(f[2]), naive_utc_to_us(f[3])
        except ValueError as e:
            raise Reject("not_numeric", f"bad datetime: {e}") from e
        nums = {DEBS2015_COLUMNS[j]: _float(f[j], DEBS2015_COLUMNS[j]) for j in self.NUMERIC}
        lon, lat = nums["pickup_longitude"], nums["pickup_latitude"]
        located = lon != 0.0 and lat != 0.0
        attrs = {
            c: f[j]
            for j, c in enumerate(DEBS2015_COLUMNS)
            if c not in ("medallion", "pickup_datetime", "pickup_longitude", "pickup_latitude", "fare_amount")
        }
        return Row(
            self.stream,
            f[0],
            pickup,
            dropoff,
            lon if located else None,
            lat if located else None,
            None,
            nums["fare_amount"],
            attrs,
        )


@dataclass(frozen=True)
class SyntheticSoccerReader(Debs2013Reader):
    """DEBS 2013 format written by :mod:`outoforder.sources.synthetic` (22 players a side)."""

    name: ClassVar[str] = "soccer_synthetic"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensor_streams", dict(SYNTHETIC_STREAMS))


READERS: dict[str, type[Debs2013Reader] | type[OooReader] | type[Debs2015Reader]] = {
    "debs2013": Debs2013Reader,
    "soccer_synthetic": SyntheticSoccerReader,
    "ooo": OooReader,
    "debs2015": Debs2015Reader,
}


# A canonical decimal integer of at most 18 digits: Python's int() reads it as the same number and
# str() writes it back unchanged, and it fits in 64 bits. Anything else takes the per-line path.
_CANONICAL_INT = r"^(0|-?[1-9][0-9]{0,17})$"


def _debs2013_fast(
    texts: pa.Array, streams: Mapping[int, str], attr_names: tuple[str, ...]
) -> tuple[npt.NDArray[np.bool_], dict[str, pa.Array]]:
    """The DEBS 2013 rows whose every field is a canonical integer and whose sensor is known."""
    n = len(texts)
    parts = pc.split_pattern(texts, ",")
    nf = pc.list_value_length(parts).to_numpy(zero_copy_only=False)
    offs = parts.offsets.to_numpy()[:-1]
    values = pc.list_flatten(parts)
    matched = pc.match_substring_regex(values, _CANONICAL_INT)
    good = matched.to_numpy(zero_copy_only=False)
    bad_before = np.concatenate([[0], np.cumsum(~good, dtype=np.int32)])
    ok = ((nf == 13) | (nf == 14)) & (bad_before[offs + nf] == bad_before[offs])
    ints_np = pc.cast(values if good.all() else pc.if_else(matched, values, "0"), pa.int64()).to_numpy()
    ids = np.array(sorted(streams), dtype=np.int64)
    names = np.array([streams[int(i)] for i in ids], dtype=object)
    sid = np.where(ok, ints_np[offs], 0)  # every line has a first field, if empty
    where = np.clip(np.searchsorted(ids, sid), 0, max(len(ids) - 1, 0))
    ok &= (ids[where] == sid) if len(ids) else np.zeros(n, dtype=bool)
    rows = np.flatnonzero(ok)
    base = offs[rows]

    def field(j: int) -> npt.NDArray[np.int64]:
        picked: npt.NDArray[np.int64] = ints_np[base + j]
        return picked

    has_arrival = nf[rows] == 14
    arrival = np.where(has_arrival, ints_np[base + np.where(has_arrival, 13, 0)] // 1_000_000, 0)
    attr_idx = (base[:, None] + 6 + np.arange(len(attr_names))).ravel()
    attrs = pa.MapArray.from_arrays(
        pa.array(np.arange(0, len(attr_names) * (len(rows) + 1), len(attr_names), dtype=np.int32)),
        pa.array(np.tile(np.array(attr_names, dtype=object), len(rows)), pa.string()),
        values.take(pa.array(attr_idx)).cast(pa.string()),
    )
    cols = {
        "stream": pa.array(names[where[rows]], pa.string()),
        "key": values.take(pa.array(base)).cast(pa.string()),
        "event_ts": pa.array(field(1) // 1_000_000),
        "arrival_ts": pa.array(arrival, mask=~has_arrival),
        "x": pa.array(field(2) / 1000.0),
        "y": pa.array(field(3) / 1000.0),
        "z": pa.array(field(4) / 1000.0),
        "value": pa.array(field(5) / 1e6),
        "attrs": attrs,
    }
    return ok, cols
