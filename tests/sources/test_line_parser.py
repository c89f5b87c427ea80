"""The line layer and the parser that ingest runs in Spark tasks, against their line-at-a-time definitions.

- Reading a plain file in byte ranges (what ingest's tasks do side by side) yields exactly the
  lines of reading it whole, each once, numbered from the ranges' line counts.
- The vectorised path of a reader (``parse_fast``) gives the same accepted rows, quarantined rows,
  reasons, details and counts as the per-line :meth:`Reader.parse` on any hostile file.
- Suspect hashes are set aside, never quarantined or accepted by the parser itself.
"""

from __future__ import annotations

import functools
import io
import itertools
import os

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.sources.declared import make_reader
from outoforder.sources.lines import count_line_starts, read_line_batches
from outoforder.sources.parsing import LineParser
from outoforder.sources.readers import Reader
from outoforder.sources.synthetic import SoccerConfig, generate_soccer
from tests.sources.hostile import MAX_LINE, good_lines, mutated_line

FAST_READERS = ("debs2013", "soccer_synthetic")
# integers the fast path must leave to the per-line code: not canonical, or too long for it
EXAMPLES = int(os.environ.get("OOO_FUZZ_EXAMPLES", "150"))
EDGE_FIELDS = ["007", "+7", "-0", "0", "-", "1" * 18, "1" * 19, "-" + "9" * 18, " 5", "5 ", "٣", "1e3"]


class PerLine:
    """A reader without its vectorised path: the definition the fast path must equal."""

    def __init__(self, reader: Reader) -> None:
        self.inner = reader
        self.name = reader.name

    def is_header(self, text: str) -> bool:
        return self.inner.is_header(text)

    def parse(self, text: str):
        return self.inner.parse(text)


@st.composite
def edgy_line(draw: st.DrawFn, templates: list[str]) -> bytes:
    """A real DEBS line with a field replaced by an integer at the edge of the fast path."""
    fields = draw(st.sampled_from(templates)).split(",")
    i = draw(st.integers(0, len(fields) - 1))
    fields[i] = draw(st.sampled_from(EDGE_FIELDS))
    return ",".join(fields).encode()


@functools.cache
def synthetic_lines() -> list[str]:
    """Lines of the synthetic soccer generator (its own sensor ids)."""
    play = generate_soccer(SoccerConfig(seconds=0.05, seed=1))
    order = np.arange(len(play))
    return play.lines(order, play.ts_ps)[:60]


def lines_of(data: bytes, **kw: int) -> list[tuple[int, bytes, object]]:
    out = []
    for batch in read_line_batches(io.BytesIO(data), **kw):
        out += [(batch.first_line_no + i, x, batch.problems.get(i)) for i, x in enumerate(batch.lines)]
    return out


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=90).map(lambda b: b.replace(b"\n", b"\r")), max_size=40),
    st.sampled_from([b"", b"\n", b"\r\n"]),
    st.lists(st.floats(0, 1), max_size=6),
    st.integers(1, 9),
)
def test_byte_ranges_read_every_line_once_with_its_number(parts, tail, cuts, batch_lines):
    data = b"\n".join(parts) + tail
    whole = lines_of(data, max_line_bytes=64, batch_lines=batch_lines)
    bounds = sorted({0, len(data), *(int(c * len(data)) for c in cuts)})
    got, first = [], 1
    for lo, hi in itertools.pairwise(bounds):
        n = count_line_starts(io.BytesIO(data), lo, hi, len(data))
        part = lines_of(
            data, start=lo, end=hi, first_line_no=first, max_line_bytes=64, batch_lines=batch_lines
        )
        assert len(part) == n
        got += part
        first += n
    assert got == whole


def parse_all(
    reader: Reader, data: bytes, plausible: tuple[int, int] = (10**10, 16 * 10**9), **kw: object
) -> tuple[pa.Table, pa.Table, dict, pa.Table | None]:
    parser = LineParser(reader, plausible, **kw)
    acc, rej, sus, counts = [], [], [], {}
    for batch in read_line_batches(io.BytesIO(data), max_line_bytes=MAX_LINE, batch_lines=7):
        out = parser.parse(batch)
        acc.append(out.accepted)
        rej.append(out.quarantined)
        if out.suspects is not None:
            sus.append(out.suspects)
        for k, v in vars(out.counts).items():
            counts[k] = counts.get(k, 0) + v
    return pa.concat_tables(acc), pa.concat_tables(rej), counts, pa.concat_tables(sus) if sus else None


def plain(templates: list[str]) -> st.SearchStrategy[bytes]:
    return st.sampled_from(templates).map(str.encode)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FAST_READERS), st.data())
def test_the_vectorised_path_equals_the_per_line_definition(name, data):
    templates = good_lines("debs2013") if name == "debs2013" else synthetic_lines()
    line = plain(templates) | plain(templates) | mutated_line("debs2013", templates) | edgy_line(templates)
    lines = data.draw(st.lists(line, max_size=30))
    if data.draw(st.booleans()):
        lines.insert(0, b"\xef\xbb\xbf" + (lines[0] if lines else b""))  # a byte-order mark on line 1
    if lines and data.draw(st.booleans()):
        lines.append(lines[data.draw(st.integers(0, len(lines) - 1))])  # an exact duplicate
    content = b"\n".join(lines) + b"\n"
    reader = make_reader(name)
    fast = parse_all(reader, content)
    slow = parse_all(PerLine(reader), content)
    assert fast[0].to_pylist() == slow[0].to_pylist()
    assert fast[1].to_pylist() == slow[1].to_pylist()
    assert fast[2] == slow[2]


def test_the_vectorised_path_takes_the_plain_lines():
    lines = good_lines("debs2013", n=30)
    content = ("\n".join(lines) + "\n").encode()
    reader = make_reader("debs2013")
    parser = LineParser(reader)
    (batch,) = read_line_batches(io.BytesIO(content))
    taken, table = parser._fast(batch)
    assert taken.tolist() == list(range(1, 30))  # line 1 (header rules, byte-order mark) per line
    assert table is not None and table.num_rows == 29


def test_suspect_hashes_are_set_aside_and_the_rest_kept():
    lines = good_lines("debs2013", n=12)
    content = ("\n".join(lines) + "\n").encode()
    reader = make_reader("debs2013")
    everything = parse_all(reader, content, local=False)[0]
    hashes = everything.column("row_hash").to_numpy()
    chosen = hashes[[2, 5, 9]]
    kept, rejected, counts, aside = parse_all(reader, content, local=False, suspects=chosen)
    assert aside is not None and sorted(aside.column("row_hash").to_pylist()) == sorted(chosen.tolist())
    assert not np.isin(kept.column("row_hash").to_numpy(), chosen).any()
    assert kept.num_rows + aside.num_rows == everything.num_rows and rejected.num_rows == 0
    assert counts["accepted"] == kept.num_rows  # suspects are neither accepted nor quarantined yet
