"""Readers for the project's datasets: raw lines in, bronze rows and quarantine rows out.

A reader parses one line into a :class:`Row` or raises :class:`Reject` with a reason. The shared
driver :func:`read_file` adds everything readers must not each get wrong: an optional header on
line 1, blank lines, exact duplicate rows, implausible timestamps, non-finite values, and Arrow
batches of bounded size. For every file::

    lines = header_lines + blank_lines + accepted + quarantined

Quarantine reasons: ``column_count``, ``not_numeric``, ``non_finite_value``, ``null_key``,
``null_timestamp``, ``implausible_timestamp``, ``unknown_sensor``, ``duplicate_row``,
``encoding``, ``line_too_long``, ``corrupt_file``.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import pyarrow as pa

from outoforder.core.time import ms_to_us, naive_utc_to_us, ps_to_us
from outoforder.errors import ConfigError
from outoforder.sources.lines import read_lines


class Reject(Exception):
    """Raised by a reader's ``parse`` for a line that goes to quarantine."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


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

    name: ClassVar[str]

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


# DEBS 2013 sensor metadata (shared/data/debs2013/metadata.txt): sensor id -> stream.
BALL_SENSORS = (4, 8, 10, 12)
TEAM_A_SENSORS = (13, 14, 97, 98, 47, 16, 49, 88, 19, 52, 53, 54, 23, 24, 57, 58, 59, 28)
TEAM_B_SENSORS = (61, 62, 99, 100, 63, 64, 65, 66, 67, 68, 69, 38, 71, 40, 73, 74, 75, 44)
REFEREE_SENSORS = (105, 106)
DEBS2013_STREAMS: dict[int, str] = {
    **{s: "ball" for s in BALL_SENSORS},
    **{s: "team_a" for s in TEAM_A_SENSORS},
    **{s: "team_b" for s in TEAM_B_SENSORS},
    **{s: "referee" for s in REFEREE_SENSORS},
}


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
        from outoforder.sources.synthetic import SYNTHETIC_STREAMS

        object.__setattr__(self, "sensor_streams", dict(SYNTHETIC_STREAMS))


READERS: dict[str, type[Debs2013Reader] | type[OooReader] | type[Debs2015Reader]] = {
    "debs2013": Debs2013Reader,
    "soccer_synthetic": SyntheticSoccerReader,
    "ooo": OooReader,
    "debs2015": Debs2015Reader,
}


def make_reader(name: str) -> Reader:
    """The reader registered under ``name``."""
    try:
        return READERS[name]()
    except KeyError as e:
        msg = f"unknown reader {name!r}; known: {', '.join(sorted(READERS))}"
        raise ConfigError(msg) from e


def row_hash(text: str) -> int:
    """A stable signed 64-bit digest of a line's content (exact-duplicate detection)."""
    return int.from_bytes(hashlib.blake2b(text.strip().encode(), digest_size=8).digest(), "big", signed=True)


STAGED_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("key", pa.string()),
        ("event_ts", pa.int64()),
        ("arrival_ts", pa.int64()),
        ("x", pa.float64()),
        ("y", pa.float64()),
        ("z", pa.float64()),
        ("value", pa.float64()),
        ("attrs", pa.map_(pa.string(), pa.string())),
        ("row_hash", pa.int64()),
        ("line_no", pa.int64()),
        ("raw_line", pa.string()),
    ]
)
REJECT_SCHEMA = pa.schema(
    [
        ("line_no", pa.int64()),
        ("raw_line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
)


@dataclass
class FileCounts:
    """Running line accounting of one file."""

    lines: int = 0
    header_lines: int = 0
    blank_lines: int = 0
    accepted: int = 0
    quarantined: int = 0

    @property
    def rows_read(self) -> int:
        """Data rows = accepted + quarantined (headers and blank lines are not rows)."""
        return self.accepted + self.quarantined


@dataclass(frozen=True)
class ReadBatch:
    """A bounded chunk of a file: accepted rows (in file order) and quarantined rows."""

    accepted: pa.Table
    quarantined: pa.Table
    counts: FileCounts


class _Acc:
    def __init__(self) -> None:
        self.rows: list[tuple[Row, int, int, str]] = []
        self.rejects: list[tuple[int, str, str, str]] = []

    def __len__(self) -> int:
        return len(self.rows) + len(self.rejects)

    def flush(self, counts: FileCounts) -> ReadBatch:
        r = self.rows
        accepted = pa.table(
            {
                "stream": [t[0].stream for t in r],
                "key": [t[0].key for t in r],
                "event_ts": [t[0].event_us for t in r],
                "arrival_ts": [t[0].arrival_us for t in r],
                "x": [t[0].x for t in r],
                "y": [t[0].y for t in r],
                "z": [t[0].z for t in r],
                "value": [t[0].value for t in r],
                "attrs": [list(t[0].attrs.items()) for t in r],
                "row_hash": [t[1] for t in r],
                "line_no": [t[2] for t in r],
                "raw_line": [t[3] for t in r],
            },
            schema=STAGED_SCHEMA,
        )
        q = self.rejects
        quarantined = pa.table(
            {
                "line_no": [t[0] for t in q],
                "raw_line": [t[1] for t in q],
                "reason": [t[2] for t in q],
                "detail": [t[3] for t in q],
            },
            schema=REJECT_SCHEMA,
        )
        self.rows, self.rejects = [], []
        return ReadBatch(accepted, quarantined, FileCounts(**vars(counts)))


def read_file(
    path: str | Path,
    reader: Reader,
    plausible_us: tuple[int, int] = (-(2**63), 2**63 - 1),
    batch_rows: int = 200_000,
    max_line_bytes: int = 1 << 20,
) -> Iterator[ReadBatch]:
    """Read ``path`` with ``reader``; yield batches whose counts are cumulative for the file."""
    counts = FileCounts()
    acc = _Acc()
    seen: set[int] = set()
    lo, hi = plausible_us
    for line in read_lines(path, max_line_bytes):
        counts.lines += 1
        if line.problem is not None:
            acc.rejects.append((line.line_no, line.raw, line.problem, line.detail))
            counts.quarantined += 1
        elif line.text is None or not line.text.strip():
            counts.blank_lines += 1
        elif line.line_no == 1 and reader.is_header(line.text):
            counts.header_lines += 1
        else:
            # a UTF-8 byte-order mark belongs to the file, not to the first field
            text = line.text.lstrip("\ufeff") if line.line_no == 1 else line.text
            try:
                row = reader.parse(text)
                if not lo <= row.event_us <= hi:
                    raise Reject("implausible_timestamp", f"event_ts={row.event_us} outside [{lo}, {hi}]")
                if row.arrival_us is not None and not lo <= row.arrival_us <= hi:
                    raise Reject("implausible_timestamp", f"arrival_ts={row.arrival_us} outside [{lo}, {hi}]")
                h = row_hash(text)
                if h in seen:
                    raise Reject("duplicate_row", "same content as an earlier line of this file")
                seen.add(h)
                acc.rows.append((row, h, line.line_no, text))
                counts.accepted += 1
            except Reject as r:
                acc.rejects.append((line.line_no, text[:4096], r.reason, r.detail))
                counts.quarantined += 1
        if len(acc) >= batch_rows:
            yield acc.flush(counts)
    yield acc.flush(counts)
