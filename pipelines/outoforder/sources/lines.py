"""Reading raw files line by line without ever crashing or losing a line.

Whatever a file holds -- plain or gzip text, a truncated or corrupt gzip stream, bytes that are
not UTF-8, a line of a gigabyte -- :func:`read_lines` yields one :class:`Line` per physical line,
each either decoded text or a ``problem`` naming why it cannot be parsed. An unreadable remainder
of a file (the gzip stream breaks) becomes one final line with problem ``corrupt_file``: every
line read is accounted for, and nothing is silently dropped.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from outoforder.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
RAW_KEEP_BYTES = 4096  # how much of an unparseable line is kept in quarantine


@dataclass(frozen=True)
class Line:
    """One physical line: ``text`` when decodable, else ``problem`` (and ``raw`` for the record)."""

    line_no: int
    text: str | None
    raw: str
    problem: str | None = None
    detail: str = ""


def _open(path: Path) -> BinaryIO:
    try:
        fh: BinaryIO = path.open("rb")
    except OSError as e:
        msg = f"cannot open {path}: {e}"
        raise InputError(msg) from e
    head = fh.read(2)
    fh.seek(0)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


def _preview(data: bytes) -> str:
    return data[:RAW_KEEP_BYTES].decode("utf-8", errors="backslashreplace")


def read_lines(path: str | Path, max_line_bytes: int = 1 << 20) -> Iterator[Line]:
    """Yield every line of ``path`` (plain or gzip), numbered from 1, never raising on content."""
    p = Path(path)
    line_no = 0
    with _open(p) as fh:
        while True:
            try:
                chunk = fh.readline(max_line_bytes + 1)
                if not chunk:
                    return
                line_no += 1
                if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
                    total = len(chunk)
                    rest = chunk
                    while rest and not rest.endswith(b"\n"):  # skip the rest of the line
                        rest = fh.readline(max_line_bytes)
                        total += len(rest)
                    yield Line(
                        line_no,
                        None,
                        _preview(chunk),
                        "line_too_long",
                        f"{total} bytes > limit {max_line_bytes}",
                    )
                    continue
            except (EOFError, OSError, zlib.error) as e:
                # gzip.BadGzipFile is an OSError; EOFError = truncated stream.
                yield Line(
                    line_no + 1, None, "", "corrupt_file", f"{type(e).__name__}: {e} (after line {line_no})"
                )
                return
            body = chunk.rstrip(b"\r\n")
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as e:
                yield Line(line_no, None, _preview(body), "encoding", str(e))
                continue
            yield Line(line_no, text, text)
