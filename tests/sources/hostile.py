"""Hostile files for fuzzing the readers and ingest: real lines, mutated field by field.

Random bytes almost never look like a row, so they only exercise the line layer. These files start
from real lines of each dataset (the shared data folder) and mutate fields with the values that
break parsers: NaN and infinities, numbers beyond 64 bits, empty and quoted fields, stray
delimiters, control and non-UTF-8 bytes, huge lines; then they may be gzipped and truncated.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

from hypothesis import strategies as st

from outoforder.config import load_settings

FILES = {
    "debs2013": "debs2013/fullgame_head1000_jkpjkpjkp.csv",
    "ooo": "ooo-dataset/d-1.csv.gz",
    "debs2015": "debs2015/sorted_data_first10004.csv.gz",
}
DELIMITER = {"debs2013": ",", "ooo": ";", "debs2015": ","}
HOSTILE_FIELDS = [
    "", " ", "nan", "NaN", "-nan", "inf", "-Infinity", "1e400", "-1e400", "1e-400", "9" * 40, "-" + "9" * 40,
    "9223372036854775808", "-9223372036854775809", "0x1F", "1_000", "١٢٣", '"', '""', '"x', "NA",
    "\x00", "\t", "é", "2013-13-45 25:61:61", "0000-00-00 00:00:00", "9999-12-31 23:59:59",
]  # fmt: skip
MAX_LINE = 2_000  # the ingest setting used with these files: longer lines are quarantined

REASONS = {
    "column_count", "not_numeric", "non_finite_value", "null_key", "null_timestamp",
    "implausible_timestamp", "unknown_sensor", "duplicate_row", "encoding", "line_too_long", "corrupt_file",
}  # fmt: skip


def good_lines(reader: str, n: int = 40) -> list[str]:
    """The first ``n`` data lines of the reader's real file (after its header)."""
    path = load_settings().data_dir / FILES[reader]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        lines = [next(fh).rstrip("\n") for _ in range(n + 1)]
    return lines[1:] if reader != "debs2015" else lines[:n]


def _one_line(text: str) -> str:
    return text.replace("\n", " ")


@st.composite
def mutated_line(draw: st.DrawFn, reader: str, templates: list[str]) -> bytes:
    """A real line with zero to three fields replaced, dropped or duplicated, or raw junk."""
    kind = draw(st.sampled_from(["good", "field", "field", "field", "junk", "huge", "bytes"]))
    line = draw(st.sampled_from(templates))
    if kind == "good":
        return line.encode()
    if kind == "junk":
        return _one_line(draw(st.text(max_size=80))).encode("utf-8", "surrogatepass")
    if kind == "huge":
        return (line + DELIMITER[reader] + "9" * draw(st.integers(MAX_LINE, 3 * MAX_LINE))).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=60)).replace(b"\n", b" ")
    fields = line.split(DELIMITER[reader])
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(fields) - 1))
        op = draw(st.sampled_from(["replace", "replace", "drop", "repeat"]))
        if op == "replace":
            fields[i] = draw(
                st.sampled_from(HOSTILE_FIELDS) | st.text(max_size=12).map(lambda s: s.replace("\n", ""))
            )
        elif op == "drop" and len(fields) > 1:
            fields.pop(i)
        else:
            fields.insert(i, fields[i])
    return DELIMITER[reader].join(fields).encode("utf-8", "surrogatepass")


@st.composite
def hostile_file(draw: st.DrawFn, reader: str, templates: list[str]) -> tuple[bytes, int | None]:
    """A file's bytes, and its physical line count when every line is readable (None if truncated)."""
    lines = draw(st.lists(mutated_line(reader, templates), min_size=0, max_size=40))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), b"")  # a blank line
    body = b"\n".join(lines) + (b"\n" if lines and draw(st.booleans()) else b"")
    count: int | None = body.count(b"\n") + (1 if body and not body.endswith(b"\n") else 0)
    if body.startswith(b"\x1f\x8b"):
        count = None  # random bytes that begin like gzip: read (and rejected) as a broken gzip stream
    if draw(st.booleans()):
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as fh:
            fh.write(body)
        body = buf.getvalue()
        if draw(st.booleans()):
            body = body[: draw(st.integers(0, max(len(body) - 1, 0)))]
            count = None
    return body, count


def write(folder: Path, name: str, content: bytes) -> Path:
    """``content`` as a file in ``folder``."""
    path = folder / name
    path.write_bytes(content)
    return path
