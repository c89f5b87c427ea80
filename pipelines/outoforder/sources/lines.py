"""Reading raw files line by line without ever crashing or losing a line.

Whatever a file holds -- plain or gzip text, a truncated or corrupt gzip stream, bytes that are
not UTF-8, a line of a gigabyte -- every physical line comes out once, numbered from 1, either as
its bytes or with a ``problem`` naming why it cannot be parsed. An unreadable remainder of a file
(the gzip stream breaks) becomes one final line with problem ``corrupt_file``: every line read is
accounted for, and nothing is silently dropped.

A plain file can be read in byte ranges (:func:`read_line_batches` with ``start``/``end``): a
line belongs to the range its first byte lies in, so ranges read side by side (one Spark task
each) see every line exactly once. Line numbers then need the line counts of the ranges before
(:func:`count_line_starts`, a byte count per range). A gzip file is one range: the stream cannot
be entered in the middle.

:func:`read_lines` is the one-line-at-a-time view of the same reader (UTF-8 decoded, an
undecodable line becomes problem ``encoding``).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from outoforder.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
RAW_KEEP_BYTES = 4096  # how much of an unparseable line is kept in quarantine
READ_BUFFER = 1 << 20


@dataclass(frozen=True)
class Line:
    """One physical line: ``text`` when decodable, else ``problem`` (and ``raw`` for the record)."""

    line_no: int
    text: str | None
    raw: str
    problem: str | None = None
    detail: str = ""


@dataclass
class LineBatch:
    r"""Consecutive physical lines: their bytes (without the trailing ``\\r``/``\\n``) and the problems.

    ``lines[i]`` is line ``first_line_no + i``; a line with a problem (``line_too_long``,
    ``corrupt_file``) has ``b""`` there and ``problems[i] = (problem, raw preview, detail)``.
    """

    first_line_no: int
    lines: list[bytes] = field(default_factory=list)
    problems: dict[int, tuple[str, str, str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.lines)


def is_gzip(head: bytes) -> bool:
    """Whether a file's first bytes are gzip's magic number."""
    return head[:2] == GZIP_MAGIC


def _preview(data: bytes) -> str:
    return data[:RAW_KEEP_BYTES].decode("utf-8", errors="backslashreplace")


def open_binary(path: str | Path) -> BinaryIO:
    """A local file for reading (the error names the file)."""
    try:
        return Path(path).open("rb", buffering=READ_BUFFER)
    except OSError as e:
        msg = f"cannot open {path}: {e}"
        raise InputError(msg) from e


def read_line_batches(
    raw: BinaryIO,
    *,
    gz: bool = False,
    start: int = 0,
    end: int | None = None,
    first_line_no: int = 1,
    max_line_bytes: int = 1 << 20,
    batch_lines: int = 65_536,
) -> Iterator[LineBatch]:
    """Every line of ``raw`` whose first byte lies in ``[start, end)``, in batches; never raises on content.

    ``gz``: ``raw`` is a gzip stream, read whole (``start`` 0, ``end`` None). A line longer than
    ``max_line_bytes`` is skipped to its end and reported as ``line_too_long``.
    """
    if gz and (start or end is not None):
        msg = "a gzip stream cannot be read in byte ranges"
        raise InputError(msg)
    fh: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw  # type: ignore[assignment]
    pos = start
    if start > 0:
        raw.seek(start - 1)
        if raw.read(1) != b"\n":  # the line in progress at ``start`` belongs to the range before
            rest = raw.readline(READ_BUFFER)
            pos += len(rest)
            while rest and not rest.endswith(b"\n"):
                rest = raw.readline(READ_BUFFER)
                pos += len(rest)
    batch = LineBatch(first_line_no)
    line_no = first_line_no - 1
    while end is None or pos < end:
        try:
            chunk = fh.readline(max_line_bytes + 1)
            if not chunk:
                break
            line_no += 1
            pos += len(chunk)
            if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
                total = len(chunk)
                rest = chunk
                while rest and not rest.endswith(b"\n"):  # skip the rest of the line
                    rest = fh.readline(max_line_bytes)
                    total += len(rest)
                pos += total - len(chunk)
                batch.problems[len(batch.lines)] = (
                    "line_too_long",
                    _preview(chunk),
                    f"{total} bytes > limit {max_line_bytes}",
                )
                batch.lines.append(b"")
            else:
                batch.lines.append(chunk.rstrip(b"\r\n"))
        except (EOFError, OSError, zlib.error) as e:
            # gzip.BadGzipFile is an OSError; EOFError = truncated stream.
            detail = f"{type(e).__name__}: {e} (after line {line_no})"
            batch.problems[len(batch.lines)] = ("corrupt_file", "", detail)
            batch.lines.append(b"")
            break
        if len(batch.lines) >= batch_lines:
            yield batch
            batch = LineBatch(line_no + 1)
    yield batch


def count_line_starts(raw: BinaryIO, start: int, end: int, size: int) -> int:
    r"""How many lines of a plain file of ``size`` bytes begin in ``[start, end)``.

    A line begins at byte 0 and after every ``\n`` but the file's last byte, so the count is
    the newlines at ``[start - 1, min(end, size) - 1)``, plus the line at byte 0.
    """
    first = 1 if start == 0 < min(end, size) else 0
    lo, hi = max(start - 1, 0), min(end, size) - 1
    raw.seek(lo)
    count, todo = first, hi - lo
    while todo > 0:
        block = raw.read(min(todo, 8 * READ_BUFFER))
        if not block:
            break
        count += block.count(b"\n")
        todo -= len(block)
    return count


def decode(line: bytes) -> tuple[str | None, str]:
    """(text, "") or (None, the decoder's message) for a line's bytes."""
    try:
        return line.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        return None, str(e)


def read_lines(path: str | Path, max_line_bytes: int = 1 << 20) -> Iterator[Line]:
    """Yield every line of ``path`` (plain or gzip), numbered from 1, never raising on content."""
    with open_binary(path) as raw:
        gz = is_gzip(raw.read(2))
        raw.seek(0)
        for batch in read_line_batches(raw, gz=gz, max_line_bytes=max_line_bytes):
            for i, body in enumerate(batch.lines):
                line_no = batch.first_line_no + i
                problem = batch.problems.get(i)
                if problem is not None:
                    yield Line(line_no, None, problem[1], problem[0], problem[2])
                    continue
                text, why = decode(body)
                if text is None:
                    yield Line(line_no, None, _preview(body), "encoding", why)
                else:
                    yield Line(line_no, text, text)


def read_parquet_batches(raw: BinaryIO, *, batch_lines: int = 65_536) -> Iterator[LineBatch]:
    """A Parquet file's rows as lines: each row one JSON object (in file order, numbered from 1).

    A declared source in Parquet is then read by the JSON-lines rules (fields by name), and a
    quarantined row keeps its JSON text. Timestamps become ISO 8601 text (with their zone when the
    column has one), other values their JSON form. A file that is not Parquet, or breaks part-way,
    ends with one ``corrupt_file`` line, as a broken gzip stream does.
    """
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    line_no = 1
    try:
        for record_batch in pq.ParquetFile(raw).iter_batches(batch_size=batch_lines):
            rows = record_batch.to_pylist()
            batch = LineBatch(line_no, [json.dumps(r, default=str).encode() for r in rows])
            line_no += len(rows)
            yield batch
    except (OSError, pa.ArrowException) as e:
        detail = f"not a readable Parquet file: {e}"[:200]
        yield LineBatch(line_no, [b""], {0: ("corrupt_file", "", detail)})
