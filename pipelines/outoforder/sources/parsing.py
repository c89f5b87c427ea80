"""The shared line driver: the lines of a file, parsed by a reader, into bronze rows and quarantine rows.

:class:`LineParser` adds to a reader (:class:`~outoforder.sources.readers.Reader`) everything
readers must not each get wrong: an optional header on line 1, blank lines, exact duplicate rows,
implausible timestamps, non-finite values, and Arrow batches of bounded size. For every file::

    lines = header_lines + blank_lines + accepted + quarantined

:func:`read_file` reads a whole file in one place; the ingest runs the same parser in Spark tasks
over byte ranges of a file (:mod:`outoforder.stages.ingest.files`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from outoforder.sources.lines import (
    RAW_KEEP_BYTES,
    LineBatch,
    decode,
    is_gzip,
    open_binary,
    read_line_batches,
)
from outoforder.sources.readers import Reader, Reject, Row


def row_hash(text: str) -> int:
    """A stable signed 64-bit digest of a line's content (exact-duplicate detection)."""
    return int.from_bytes(hashlib.blake2b(text.strip().encode(), digest_size=8).digest(), "big", signed=True)


def _hashes(lines: list[bytes]) -> npt.NDArray[np.int64]:
    """:func:`row_hash` of lines that are their own stripped UTF-8 text (the fast path's lines)."""
    b2 = hashlib.blake2b
    digests = b"".join([b2(x, digest_size=8).digest() for x in lines])
    hashes: npt.NDArray[np.int64] = np.frombuffer(digests, dtype=">i8").astype(np.int64)
    return hashes


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


WITHIN_FILE = "same content as an earlier line of this file"


ACROSS_FILES = "same content as a row of an earlier file of this source"


@dataclass
class FileCounts:
    """Running line accounting of one file (or of a part of it)."""

    lines: int = 0
    header_lines: int = 0
    blank_lines: int = 0
    accepted: int = 0
    quarantined: int = 0

    @property
    def rows_read(self) -> int:
        """Data rows = accepted + quarantined (headers and blank lines are not rows)."""
        return self.accepted + self.quarantined

    def add(self, other: FileCounts) -> None:
        """Add another part's counts."""
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


@dataclass(frozen=True)
class ReadBatch:
    """A bounded chunk of a file: accepted rows (in file order) and quarantined rows.

    ``counts`` are cumulative for the file (:func:`read_file`) or the batch's own
    (:meth:`LineParser.parse`). ``suspects`` are accepted rows whose content may repeat a row
    this parser cannot see (another range of the file, an earlier file): they are set aside for
    a decision over the whole source (:mod:`outoforder.stages.ingest.files`).
    """

    accepted: pa.Table
    quarantined: pa.Table
    counts: FileCounts
    suspects: pa.Table | None = None


class FastParser(Protocol):
    """A reader with a vectorised parse of the lines it can decide without the per-line code."""

    def parse_fast(self, texts: pa.Array) -> tuple[npt.NDArray[np.bool_], dict[str, pa.Array]]:
        """(lines parsed, their columns): exactly what :meth:`Reader.parse` gives those lines."""
        ...


def _plain_lines(batch: LineBatch) -> tuple[npt.NDArray[np.bool_], bytes, npt.NDArray[np.int64]]:
    """(which lines are printable ASCII with no blank at either end, the lines' bytes joined, their ends).

    Such a line's stripped text is its bytes: it can be hashed and parsed without decoding.
    """
    n = len(batch.lines)
    lens = np.fromiter(map(len, batch.lines), dtype=np.int64, count=n)
    ends = np.cumsum(lens)
    starts = ends - lens
    buf = b"".join(batch.lines)
    data = np.frombuffer(buf, dtype=np.uint8)
    nonempty = lens > 0
    if data.size == 0:
        return np.zeros(n, dtype=bool), buf, ends
    first_byte = data[np.where(nonempty, starts, 0)]
    last_byte = data[np.where(nonempty, ends - 1, 0)]
    plain = nonempty & (first_byte != 0x20) & (last_byte != 0x20)
    bad = (data < 0x20) | (data > 0x7E)
    if bad.any():
        # empty lines hold no bytes, so the segments between non-empty starts are exactly lines
        has_bad = np.zeros(n, dtype=bool)
        has_bad[nonempty] = np.maximum.reduceat(bad, starts[nonempty])
        plain &= ~has_bad
    return plain, buf, ends


def _table(rows: list[tuple[Row, int, int, str]]) -> pa.Table:
    """Accepted rows of the per-line path as a staged table."""
    return pa.table(
        {
            "stream": [t[0].stream for t in rows],
            "key": [t[0].key for t in rows],
            "event_ts": [t[0].event_us for t in rows],
            "arrival_ts": [t[0].arrival_us for t in rows],
            "x": [t[0].x for t in rows],
            "y": [t[0].y for t in rows],
            "z": [t[0].z for t in rows],
            "value": [t[0].value for t in rows],
            "attrs": [list(t[0].attrs.items()) for t in rows],
            "row_hash": [t[1] for t in rows],
            "line_no": [t[2] for t in rows],
            "raw_line": [t[3] for t in rows],
        },
        schema=STAGED_SCHEMA,
    )


def _rejects(rows: list[tuple[int, str, str, str]]) -> pa.Table:
    return pa.table(
        {
            "line_no": [t[0] for t in rows],
            "raw_line": [t[1] for t in rows],
            "reason": [t[2] for t in rows],
            "detail": [t[3] for t in rows],
        },
        schema=REJECT_SCHEMA,
    )


class LineParser:
    """Lines of a file (or of a byte range of it) to accepted rows, quarantined rows and counts.

    Every line is either a header (line 1 only, as the reader decides), blank, accepted or
    quarantined with a reason. The reader's :meth:`~Reader.parse` is the definition; a reader with
    a vectorised ``parse_fast`` (:class:`FastParser`) decides the plain lines it can (printable
    ASCII, no surrounding blanks, not line 1) in bulk, and every line it does not decide, or that
    fails a later check, takes the per-line path, so both paths give the same rows, reasons and
    details (``tests/sources/test_line_parser.py`` holds them together).

    Duplicates: with ``local``, the hashes of the accepted rows seen so far are kept, and a later
    accepted row with a seen hash is quarantined as ``duplicate_row`` (a whole file read in one
    place). Accepted rows whose hash is in ``suspects`` are set aside instead
    (:attr:`ReadBatch.suspects`): their fate depends on rows elsewhere, and no set of the file's
    hashes is kept, so memory stays bounded by the batch.
    """

    def __init__(
        self,
        reader: Reader,
        plausible_us: tuple[int, int] = (-(2**63), 2**63 - 1),
        *,
        local: bool = True,
        suspects: npt.NDArray[np.int64] | None = None,
    ) -> None:
        self.reader = reader
        self.lo, self.hi = plausible_us
        self.seen: set[int] | None = set() if local else None
        self.suspects = np.unique(suspects) if suspects is not None else np.zeros(0, dtype=np.int64)

    def _plausible(self, row: Row) -> None:
        if not self.lo <= row.event_us <= self.hi:
            raise Reject("implausible_timestamp", f"event_ts={row.event_us} outside [{self.lo}, {self.hi}]")
        if row.arrival_us is not None and not self.lo <= row.arrival_us <= self.hi:
            raise Reject(
                "implausible_timestamp", f"arrival_ts={row.arrival_us} outside [{self.lo}, {self.hi}]"
            )

    def _fast(self, batch: LineBatch) -> tuple[npt.NDArray[np.int64], pa.Table | None]:
        """(the line indices the vectorised path accepted, their staged rows)."""
        parse_fast = getattr(self.reader, "parse_fast", None)
        n = len(batch.lines)
        none = np.zeros(0, dtype=np.int64)
        if parse_fast is None or n == 0:
            return none, None
        plain, buf, ends = _plain_lines(batch)
        line_nos = np.arange(batch.first_line_no, batch.first_line_no + n, dtype=np.int64)
        idx = np.flatnonzero(plain & (line_nos != 1))
        if idx.size == 0:
            return none, None
        offsets = pa.py_buffer(np.concatenate([[0], ends]).astype(np.int64))
        binary = pa.Array.from_buffers(pa.large_binary(), n, [None, offsets, pa.py_buffer(buf)])
        texts = binary.take(pa.array(idx)).cast(pa.large_string())
        ok, cols = parse_fast(texts)
        if not ok.any():
            return none, None
        event = cols["event_ts"].to_numpy(zero_copy_only=False)
        arrival = cols["arrival_ts"]
        has_arrival = ~np.asarray(arrival.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        arrival_np = arrival.fill_null(0).to_numpy(zero_copy_only=False)
        keep = (event >= self.lo) & (event <= self.hi)
        keep &= ~has_arrival | ((arrival_np >= self.lo) & (arrival_np <= self.hi))
        taken = idx[ok][keep]
        picked = pa.array(np.flatnonzero(keep))
        table = pa.table({name: col.take(picked) for name, col in cols.items()})
        table = table.append_column("row_hash", pa.array(_hashes([batch.lines[i] for i in taken])))
        table = table.append_column("line_no", pa.array(line_nos[taken]))
        table = table.append_column("raw_line", texts.filter(pa.array(ok)).take(picked).cast(pa.string()))
        return taken, table.cast(STAGED_SCHEMA)

    def parse(self, batch: LineBatch) -> ReadBatch:
        """One batch of lines; ``counts`` are this batch's own."""
        counts = FileCounts(lines=len(batch.lines))
        fast_idx, fast = self._fast(batch)
        done = set(fast_idx.tolist())
        rows: list[tuple[Row, int, int, str]] = []
        rejects: list[tuple[int, str, str, str]] = []
        for i, body in enumerate(batch.lines):
            if i in done:
                continue
            line_no = batch.first_line_no + i
            problem = batch.problems.get(i)
            if problem is not None:
                rejects.append((line_no, problem[1], problem[0], problem[2]))
                continue
            text, why = decode(body)
            if text is None:
                rejects.append(
                    (line_no, body[:RAW_KEEP_BYTES].decode("utf-8", "backslashreplace"), "encoding", why)
                )
            elif not text.strip():
                counts.blank_lines += 1
            elif line_no == 1 and self.reader.is_header(text):
                counts.header_lines += 1
            else:
                # a UTF-8 byte-order mark belongs to the file, not to the first field
                text = text.lstrip("\ufeff") if line_no == 1 else text
                try:
                    row = self.reader.parse(text)
                    self._plausible(row)
                    rows.append((row, row_hash(text), line_no, text))
                except Reject as r:
                    rejects.append((line_no, text[:RAW_KEEP_BYTES], r.reason, r.detail))
        accepted = _table(rows)
        if fast is not None:
            accepted = pa.concat_tables([fast, accepted])
            order = np.argsort(accepted.column("line_no").to_numpy(), kind="stable")
            accepted = accepted.take(pa.array(order))
        hashes = accepted.column("row_hash").to_numpy()
        suspects = None
        if self.suspects.size:
            aside = np.isin(hashes, self.suspects)
            suspects = accepted.filter(pa.array(aside))
            accepted = accepted.filter(pa.array(~aside))
            hashes = hashes[~aside]
        if self.seen is not None:
            seen, dup = self.seen, np.zeros(len(hashes), dtype=bool)
            for j, h in enumerate(hashes.tolist()):
                if h in seen:
                    dup[j] = True
                else:
                    seen.add(h)
            if dup.any():
                dups = accepted.filter(pa.array(dup))
                raw = dups.column("raw_line").to_pylist()
                rejects += [
                    (n, t[:RAW_KEEP_BYTES], "duplicate_row", WITHIN_FILE)
                    for n, t in zip(dups.column("line_no").to_pylist(), raw, strict=True)
                ]
                accepted = accepted.filter(pa.array(~dup))
        rejected = _rejects(sorted(rejects, key=lambda r: r[0]))
        counts.accepted = accepted.num_rows
        counts.quarantined = rejected.num_rows
        return ReadBatch(accepted, rejected, counts, suspects)


def line_hashes(reader: Reader, batch: LineBatch) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(index, :func:`row_hash`) of every line of ``batch`` that could be accepted.

    That is every line that is readable, not blank and not line 1's header: the only lines the
    parser may accept, hashed the way it hashes them, without parsing them.
    """
    plain_mask, _, _ = _plain_lines(batch)
    if batch.first_line_no == 1 and len(plain_mask):
        plain_mask[0] = False  # line 1: header rules and the byte-order mark, per line
    idx = np.flatnonzero(plain_mask).tolist()
    plain = [batch.lines[i] for i in idx]
    other: list[tuple[int, int]] = []
    for i in np.flatnonzero(~plain_mask).tolist():
        body = batch.lines[i]
        if not body or i in batch.problems:
            continue
        line_no = batch.first_line_no + i
        text, _ = decode(body)
        if text is None or not text.strip() or (line_no == 1 and reader.is_header(text)):
            continue
        other.append((i, row_hash(text.lstrip("\ufeff") if line_no == 1 else text)))
    hashes = _hashes(plain)
    if other:
        idx += [i for i, _ in other]
        hashes = np.concatenate([hashes, np.array([h for _, h in other], dtype=np.int64)])
    order = np.argsort(np.array(idx, dtype=np.int64), kind="stable")
    return np.array(idx, dtype=np.int64)[order], hashes[order]


def read_file(
    path: str | Path,
    reader: Reader,
    plausible_us: tuple[int, int] = (-(2**63), 2**63 - 1),
    batch_rows: int = 200_000,
    max_line_bytes: int = 1 << 20,
) -> Iterator[ReadBatch]:
    """Read ``path`` with ``reader`` in one place; yield batches whose counts are cumulative for the file.

    For every file: lines = header_lines + blank_lines + accepted + quarantined. Ingest reads files
    in Spark tasks with the same :class:`LineParser` (:mod:`outoforder.stages.ingest.files`).
    """
    parser = LineParser(reader, plausible_us)
    total = FileCounts()
    with open_binary(path) as raw:
        gz = is_gzip(raw.read(2))
        raw.seek(0)
        for batch in read_line_batches(raw, gz=gz, max_line_bytes=max_line_bytes, batch_lines=batch_rows):
            out = parser.parse(batch)
            total.add(out.counts)
            yield ReadBatch(out.accepted, out.quarantined, FileCounts(**vars(total)))
