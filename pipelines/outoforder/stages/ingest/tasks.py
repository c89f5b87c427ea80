"""What ingest's Spark tasks run: pure functions over Arrow batches of work items, no Spark calls.

:mod:`outoforder.stages.ingest.files` plans the work and hands these functions to ``mapInArrow``.
A *part* is one byte range of a plain file, or a whole gzip file (see
:mod:`outoforder.sources.lines`); each task handles the parts of its input rows:

- :func:`identify`: a file's size, SHA-256 and whether it is gzip (one task per file);
- :func:`hash_pass`: a part's line count and the hashes of its lines that could be accepted, as
  sorted blobs per hash bucket; :func:`bronze_buckets` the same of bronze's earlier rows, and
  :func:`find_suspects` (a task per bucket) the hashes seen twice, or seen before in bronze;
- :func:`parse_pass`: a part parsed (:class:`~outoforder.sources.parsing.LineParser`) into
  tagged rows: its accepted rows (bronze's columns), its counts, its quarantined lines and the
  accepted rows whose hash is a *suspect* (decided over the whole source afterwards). Delta's own
  writer then appends the rows of each file to bronze and quarantine;
- :func:`parse_records`: Kafka records (one payload each) in arrival order, parsed like lines
  (:mod:`outoforder.stages.ingest.kafka`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from outoforder.config import StorageSettings
from outoforder.io.files import file_size, open_input
from outoforder.sources.declared import make_reader
from outoforder.sources.lines import (
    LineBatch,
    is_gzip,
    read_line_batches,
    read_parquet_batches,
)
from outoforder.sources.parsing import REJECT_SCHEMA, STAGED_SCHEMA, LineParser, line_hashes

# one input row per part (see plan_parts in files.py)
PART_FIELDS = [
    ("part", pa.int64()),
    ("file_idx", pa.int64()),
    ("uri", pa.string()),
    ("gz", pa.bool_()),
    ("start", pa.int64()),
    ("end", pa.int64()),  # -1: to the end of the file
    ("first_line", pa.int64()),
    ("reader", pa.string()),
    ("lo", pa.int64()),
    ("hi", pa.int64()),
    ("max_line_bytes", pa.int64()),
    ("batch_lines", pa.int64()),
    ("ingest_id", pa.string()),
    ("source", pa.string()),
    ("shown", pa.string()),
    ("base", pa.int64()),
    ("local", pa.bool_()),  # the part is its source's only part in this ingest: dedupe in the task
    ("parquet", pa.bool_()),  # a Parquet file (one part): its rows are read as JSON lines
    ("suspects", pa.list_(pa.int64())),
]
IDENTITY_SCHEMA = pa.schema(
    [
        ("file_idx", pa.int64()),
        ("size", pa.int64()),
        ("sha256", pa.string()),
        ("gz", pa.bool_()),
        ("head", pa.list_(pa.string())),  # the first lines, when asked for (a declared source's checks)
    ]
)
HEAD_LINES = 50
HASH_SCHEMA = pa.schema(
    [
        ("part", pa.int64()),
        ("lines", pa.int64()),  # the part's line count (on its bucket -1 row)
        ("bucket", pa.int64()),
        ("hashes", pa.binary()),  # the bucket's hashes, int64, sorted
    ]
)
SUSPECT_SCHEMA = pa.schema([("source", pa.string()), ("row_hash", pa.int64()), ("in_bronze", pa.bool_())])
BUCKET_BITS = 6  # the duplicate search is split into 2**6 ranges of hashes, by their top bits
# bronze's columns a parsed row carries (the driver adds source, ingest_id and source_file per file)
BRONZE_ROW_COLUMNS = (
    "stream", "key", "event_ts", "arrival_seq", "arrival_ts", "x", "y", "z", "value", "attrs", "row_hash",
    "line_no",
)  # fmt: skip
_STAGED = [(f.name, f.type) for f in STAGED_SCHEMA if f.name not in ("line_no", "raw_line")]
PARSE_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # row | counts | reject | suspect
        ("part", pa.int64()),
        ("file_idx", pa.int64()),
        # a part's counts
        ("lines", pa.int64()),
        ("header_lines", pa.int64()),
        ("blank_lines", pa.int64()),
        ("accepted", pa.int64()),
        ("quarantined", pa.int64()),
        # an accepted row, a quarantined line, or a suspect row
        ("line_no", pa.int64()),
        ("raw_line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        *_STAGED,
        ("arrival_seq", pa.int64()),
    ]
)


def _rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for b in batches:
        yield from b.to_pylist()


def identify(batches: Iterator[pa.RecordBatch], storage: StorageSettings) -> Iterator[pa.RecordBatch]:
    """Per input file (``file_idx``, ``uri``): its size, SHA-256, whether it is gzip, and its head.

    The head (when ``format`` names a declared source's format) is the first :data:`HEAD_LINES`
    lines, decoded leniently: they are only looked at, to check the declaration against the file.
    """
    for row in _rows(batches):
        size = file_size(row["uri"], storage)
        digest = hashlib.sha256()
        with open_input(row["uri"], storage) as fh:
            head = fh.read(2)
            digest.update(head)
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
        gz = is_gzip(head)
        lines = None
        if row["format"]:
            with open_input(row["uri"], storage) as fh:
                batch = next(_batches(fh, gz, row["format"] == "parquet", HEAD_LINES), None)
                lines = [x.decode("utf-8", "replace") for x in batch.lines] if batch else []
        found = {"size": size, "sha256": digest.hexdigest(), "gz": gz, "head": lines}
        yield pa.RecordBatch.from_pylist([{"file_idx": row["file_idx"], **found}], IDENTITY_SCHEMA)


def _batches(fh: Any, gz: bool, parquet: bool, batch_lines: int) -> Iterator[LineBatch]:
    if parquet:
        return read_parquet_batches(fh, batch_lines=batch_lines)
    return read_line_batches(fh, gz=gz, batch_lines=batch_lines)


def _lines(row: dict[str, Any], storage: StorageSettings) -> Iterator[Any]:
    with open_input(row["uri"], storage) as fh:
        if row["parquet"]:
            yield from read_parquet_batches(fh, batch_lines=row["batch_lines"])  # type: ignore[arg-type]
            return
        yield from read_line_batches(
            fh,  # type: ignore[arg-type]
            gz=row["gz"],
            start=row["start"],
            end=None if row["end"] < 0 else row["end"],
            first_line_no=row["first_line"],
            max_line_bytes=row["max_line_bytes"],
            batch_lines=row["batch_lines"],
        )


def _buckets(hashes: np.ndarray[Any, np.dtype[np.int64]]) -> Iterator[tuple[int, bytes]]:
    """(bucket, sorted hashes as bytes) for every non-empty bucket (by the hash's top bits)."""
    if hashes.size == 0:
        return
    ordered = np.sort(hashes)
    bucket = (ordered.view(np.uint64) >> np.uint64(64 - BUCKET_BITS)).astype(np.int64)
    cuts = np.flatnonzero(np.diff(bucket)) + 1
    for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [ordered.size]]), strict=True):
        yield int(bucket[lo]), ordered[lo:hi].tobytes()


def hash_pass(batches: Iterator[pa.RecordBatch], storage: StorageSettings) -> Iterator[pa.RecordBatch]:
    """Per part: its line count (a ``bucket`` -1 row), and its hashes of lines that could be accepted.

    The hashes come as sorted blobs per hash bucket: few rows, however many lines.
    """
    for row in _rows(batches):
        reader = make_reader(row["reader"])
        seen = 0
        found: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        for batch in _lines(row, storage):
            found.append(line_hashes(reader, batch)[1])
            seen += len(batch)
        out = [{"part": row["part"], "lines": seen, "bucket": -1, "hashes": b""}]
        hashes = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
        out += [{"part": row["part"], "lines": 0, "bucket": b, "hashes": h} for b, h in _buckets(hashes)]
        yield pa.RecordBatch.from_pylist(out, HASH_SCHEMA)


def bronze_buckets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Bronze rows (``source``, ``row_hash``) of earlier ingests as sorted blobs per (source, bucket)."""
    schema = pa.schema([("source", pa.string()), ("bucket", pa.int64()), ("hashes", pa.binary())])
    for b in batches:
        table = pa.Table.from_batches([b])
        for source in pa.compute.unique(table.column("source")).to_pylist():
            mine = table.filter(pa.compute.equal(table.column("source"), source)).column("row_hash")
            rows = [{"source": source, "bucket": k, "hashes": h} for k, h in _buckets(mine.to_numpy())]
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema)


def find_suspects(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Blobs of (source, bucket) groups -> the suspects: hashes this ingest holds twice, or bronze holds.

    ``origin`` tells this ingest's blobs (new) from bronze's earlier rows (bronze).
    """
    groups: dict[tuple[str, int, str], list[bytes]] = {}
    for row in _rows(batches):
        groups.setdefault((row["source"], row["bucket"], row["origin"]), []).append(row["hashes"])
    for source, bucket in sorted({(s, b) for s, b, _ in groups}):
        new = np.frombuffer(b"".join(groups.get((source, bucket, "new"), [])), dtype=np.int64)
        old = np.frombuffer(b"".join(groups.get((source, bucket, "bronze"), [])), dtype=np.int64)
        values, counts = np.unique(new, return_counts=True)
        in_bronze = np.isin(values, old)
        pick = (counts > 1) | in_bronze
        if pick.any():
            n = int(pick.sum())
            yield pa.RecordBatch.from_arrays(
                [pa.array([source] * n, pa.string()), pa.array(values[pick]), pa.array(in_bronze[pick])],
                schema=SUSPECT_SCHEMA,
            )


def _tagged(table: pa.Table, kind: str, row: dict[str, Any]) -> pa.RecordBatch:
    n = table.num_rows
    cols = {f.name: pa.nulls(n, f.type) for f in PARSE_SCHEMA}
    cols["kind"] = pa.array([kind] * n, pa.string())
    cols["part"] = pa.array(np.full(n, row["part"], dtype=np.int64))
    cols["file_idx"] = pa.array(np.full(n, row["file_idx"], dtype=np.int64))
    for name in table.column_names:
        # an accepted row's raw line is not stored, so it stays out of the JVM
        if name in cols and not (kind == "row" and name == "raw_line"):
            cols[name] = table.column(name).combine_chunks().cast(PARSE_SCHEMA.field(name).type)
    if kind in ("row", "suspect"):
        cols["arrival_seq"] = pa.compute.add(cols["line_no"], pa.scalar(row["base"], pa.int64()))
    return pa.RecordBatch.from_arrays([cols[f.name] for f in PARSE_SCHEMA], schema=PARSE_SCHEMA)


def parse_pass(batches: Iterator[pa.RecordBatch], storage: StorageSettings) -> Iterator[pa.RecordBatch]:
    """Parse each part: its accepted rows, counts, rejects and suspects, as PARSE_SCHEMA rows by kind."""
    for row in _rows(batches):
        reader = make_reader(row["reader"])
        suspects = np.array(row["suspects"] or [], dtype=np.int64)
        parser = LineParser(reader, (row["lo"], row["hi"]), local=row["local"], suspects=suspects)
        totals = dict.fromkeys(("lines", "header_lines", "blank_lines", "accepted", "quarantined"), 0)
        for batch in _lines(row, storage):
            out = parser.parse(batch)
            for k in totals:
                totals[k] += getattr(out.counts, k)
            if out.accepted.num_rows:
                yield _tagged(out.accepted, "row", row)
            if out.quarantined.num_rows:
                yield _tagged(out.quarantined, "reject", row)
            if out.suspects is not None and out.suspects.num_rows:
                yield _tagged(out.suspects, "suspect", row)
        yield pa.RecordBatch.from_pylist(
            [{"kind": "counts", "part": row["part"], "file_idx": row["file_idx"], **totals}], PARSE_SCHEMA
        )


__all__ = [
    "BRONZE_ROW_COLUMNS",
    "BUCKET_BITS",
    "HASH_SCHEMA",
    "IDENTITY_SCHEMA",
    "PARSE_SCHEMA",
    "PART_FIELDS",
    "REJECT_SCHEMA",
    "SUSPECT_SCHEMA",
    "bronze_buckets",
    "find_suspects",
    "hash_pass",
    "identify",
    "parse_pass",
]


# Kafka records: a *run* is a maximal stretch of one Kafka partition's records, in offset order,
# with one log-append time; it is named by (partition, its first record's offset). Runs cannot
# interleave, so sorting them by (time, partition, first offset) sorts every record by (time,
# partition, offset), the batch's arrival order, even where a broker's clock stepped back.
RUN_SCHEMA = pa.schema(
    [("partition", pa.int64()), ("run", pa.int64()), ("arrival_ts", pa.int64()), ("count", pa.int64())]
)
# a parsed record ("row" or "reject"): its run and its place in it (0-based)
RECORD_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("partition", pa.int64()),
        ("run", pa.int64()),
        ("place", pa.int64()),
        *[(f.name, f.type) for f in STAGED_SCHEMA if f.name not in ("line_no", "raw_line")],
        ("raw_line", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
    ]
)


def _filled(n: int, kind: str, **columns: Any) -> pa.RecordBatch:
    """``n`` RECORD_SCHEMA rows of ``kind``: the given columns, nulls elsewhere."""
    row: dict[str, Any] = {name: pa.nulls(n, RECORD_SCHEMA.field(name).type) for name in RECORD_SCHEMA.names}
    row["kind"] = pa.array([kind] * n)
    for k, v in columns.items():
        values = v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
        row[k] = values.cast(RECORD_SCHEMA.field(k).type)
    return pa.RecordBatch.from_pydict(row, schema=RECORD_SCHEMA)


class Runs:
    """A task's records, chunk by chunk, in the order read: each one's run and place in it.

    >>> runs = Runs()
    >>> import numpy as np
    >>> first, place = runs.add(np.array([5, 5, 6]), np.array([0, 0, 0]), np.array([10, 11, 13]))
    >>> first.tolist(), place.tolist()
    ([10, 10, 13], [0, 1, 0])
    >>> first, place = runs.add(np.array([6, 5]), np.array([0, 0]), np.array([14, 15]))
    >>> first.tolist(), place.tolist()
    ([13, 15], [1, 0])
    >>> [tuple(r.values()) for b in runs.batches() for r in b.to_pylist()]
    [(0, 10, 5, 2), (0, 13, 6, 2), (0, 15, 5, 1)]
    """

    def __init__(self) -> None:
        self.open: tuple[int, int, int, int] | None = None  # (time, partition, first offset, count)
        self.done: list[npt.NDArray[np.int64]] = []  # per chunk: partition, first offset, time, count

    def add(
        self, ts: npt.NDArray[np.int64], part: npt.NDArray[np.int64], off: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(first offset of its run, place in its run) of each record of the next chunk."""
        n = ts.size
        if not n:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        ts, part, off = (np.asarray(a, dtype=np.int64) for a in (ts, part, off))
        new = np.ones(n, dtype=bool)
        new[1:] = (ts[1:] != ts[:-1]) | (part[1:] != part[:-1])
        held = self.open
        if held is not None and held[0] == ts[0] and held[1] == part[0]:
            new[0] = False  # the open run goes on into this chunk
        starts = np.flatnonzero(new)
        group = np.cumsum(new) - 1  # -1: the open run
        # where each record's run starts in the chunk (the open run's records index the appended 0)
        at = np.append(starts, 0)[group]
        first = np.where(group >= 0, off[at], held[2] if held else 0)
        place = np.arange(n) - np.where(group >= 0, at, -(held[3] if held else 0))
        if held is not None:
            t, p, o, c = held
            c += int(starts[0]) if starts.size else n
            if starts.size:  # it ends here
                self.done.append(np.array([[p], [o], [t], [c]], dtype=np.int64))
            self.open = (t, p, o, c)
        if starts.size:
            ends = np.append(starts[1:], n)
            closed = starts[:-1]
            self.done.append(np.stack([part[closed], off[closed], ts[closed], (ends - starts)[:-1]]))
            last = int(starts[-1])
            self.open = (int(ts[last]), int(part[last]), int(off[last]), n - last)
        return first, place

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every run, the open one included, as RUN_SCHEMA batches."""
        chunks = list(self.done)
        if self.open is not None:
            t, p, o, c = self.open
            chunks.append(np.array([[p], [o], [t], [c]], dtype=np.int64))
        for chunk in chunks:
            if chunk.shape[1]:
                yield pa.RecordBatch.from_arrays([pa.array(col) for col in chunk], schema=RUN_SCHEMA)


def record_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The runs of Kafka records (``partition``, ``offset``, ``ts_us``) read in offset order: RUN_SCHEMA."""
    runs = Runs()
    for b in batches:
        ts, part, off = (b.column(c).to_numpy() for c in ("ts_us", "partition", "offset"))
        runs.add(ts, part, off)
    yield from runs.batches()


# The one metadata pass over a Kafka batch: every run (RUN_SCHEMA, payload null), then the
# task's first payloads for the declaration's check (count 0, run = the record's offset).
META_SCHEMA = pa.schema([*RUN_SCHEMA, ("payload", pa.binary())])


def record_meta(batches: Iterator[pa.RecordBatch], sample: int) -> Iterator[pa.RecordBatch]:
    """The runs of Kafka records (``partition``, ``offset``, ``ts_us``, ``value``) and ``sample`` payloads.

    >>> import pyarrow as pa
    >>> b = pa.RecordBatch.from_pydict({"partition": pa.array([0, 0, 0], pa.int32()),
    ...     "offset": [7, 8, 9], "ts_us": [5, 5, 6], "value": [b"a", b"b", b"c"]})
    >>> [tuple(r.values()) for out in record_meta(iter([b]), 2) for r in out.to_pylist()]
    [(0, 7, 5, 2, None), (0, 9, 6, 1, None), (0, 7, 0, 0, b'a'), (0, 8, 0, 0, b'b')]
    """
    runs = Runs()
    taken: list[pa.RecordBatch] = []
    left = sample
    for b in batches:
        ts, part, off = (b.column(c).to_numpy().astype(np.int64) for c in ("ts_us", "partition", "offset"))
        runs.add(ts, part, off)
        if left > 0 and b.num_rows:
            k = min(left, b.num_rows)
            taken.append(b.slice(0, k))
            left -= k
    for r in runs.batches():
        yield pa.RecordBatch.from_arrays([*r.columns, pa.nulls(r.num_rows, pa.binary())], schema=META_SCHEMA)
    for t in taken:
        n = t.num_rows
        zero = pa.array(np.zeros(n, dtype=np.int64))
        yield pa.RecordBatch.from_arrays(
            [t.column("partition").cast(pa.int64()), t.column("offset").cast(pa.int64()), zero, zero,
             t.column("value").cast(pa.binary())],
            schema=META_SCHEMA,
        )  # fmt: skip


def parse_records(
    batches: Iterator[pa.RecordBatch], reader: str, lo: int, hi: int, batch_lines: int
) -> Iterator[pa.RecordBatch]:
    """One Spark partition of Kafka records, in the order read (a topic partition's, in offset order).

    Each payload is one line for the source's :class:`~outoforder.sources.parsing.LineParser`
    (an empty or null payload counts as blank). Accepted rows get the record's log-append time as
    ``arrival_ts``; a reject's detail names the record's partition and offset. Every row and
    reject carries its run and place in it (RECORD_SCHEMA), which the runs' ranks
    (:func:`record_runs`, :func:`runs_before`) turn into its number in the batch.
    """
    parser = LineParser(make_reader(reader), (lo, hi), local=False)
    decl = getattr(parser.reader, "decl", None)
    skew_us = decl.max_clock_skew_us if decl is not None else None
    runs = Runs()
    seen = 0
    for big in batches:
        for start in range(0, big.num_rows, batch_lines):
            chunk = big.slice(start, batch_lines)
            lines = [v or b"" for v in chunk.column("value").to_pylist()]
            got = parser.parse(LineBatch(seen + 1, lines))
            ts = chunk.column("ts_us").to_numpy()
            parts = chunk.column("partition").to_numpy().astype(np.int64)
            offsets = chunk.column("offset").to_numpy()
            run, place = runs.add(ts, parts, offsets)
            acc, q = got.accepted, got.quarantined
            if skew_us is not None and acc.num_rows:
                acc, q = _ahead_of_arrival(acc, q, ts[acc.column("line_no").to_numpy() - (seen + 1)], skew_us)
            if acc.num_rows:
                idx = acc.column("line_no").to_numpy() - (seen + 1)
                # bronze keeps no raw line: it would cross into the JVM only to be dropped
                cols = {f: acc.column(f) for f in acc.column_names if f not in ("line_no", "raw_line")}
                cols["arrival_ts"] = pa.array(ts[idx], pa.int64())
                yield _filled(acc.num_rows, "row", **cols, partition=pa.array(parts[idx]),
                              run=pa.array(run[idx]), place=pa.array(place[idx]))  # fmt: skip
            if q.num_rows:
                idx = q.column("line_no").to_numpy() - (seen + 1)
                detail = [
                    f"{d} (partition {p}, offset {o})" if d else f"partition {p}, offset {o}"
                    for d, p, o in zip(q.column("detail").to_pylist(), parts[idx], offsets[idx], strict=True)
                ]
                yield _filled(q.num_rows, "reject", partition=pa.array(parts[idx]), run=pa.array(run[idx]),
                              place=pa.array(place[idx]), raw_line=q.column("raw_line"),
                              reason=q.column("reason"), detail=pa.array(detail, pa.string()))  # fmt: skip
            seen += len(lines)


# a parsed record with the number of the batch's records before its run (from the driver's ranks)
NUMBERED_SCHEMA = pa.schema([*RECORD_SCHEMA, ("before", pa.int64())])
RunStarts = dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]  # partition -> runs, before


def rank_runs(meta: pa.Table) -> tuple[RunStarts, int]:
    """The driver's ranking of every task's runs (``record_meta``'s rows): where each starts, and the total.

    The runs sorted by (log-append time, partition, first offset) are the batch's arrival order in
    stretches; a run starts after the records of every run before it.

    >>> t = pa.table({"partition": [0, 1, 0], "run": [10, 4, 20], "arrival_ts": [5, 5, 7],
    ...               "count": [2, 3, 1], "payload": pa.nulls(3, pa.binary())})
    >>> starts, total = rank_runs(t)
    >>> {p: (r.tolist(), b.tolist()) for p, (r, b) in starts.items()}, total
    ({0: ([10, 20], [0, 5]), 1: ([4], [2])}, 6)
    """
    import pyarrow.compute as pc

    runs = meta.filter(pc.greater(meta.column("count"), 0))
    part, run, ts, count = (runs.column(c).to_numpy() for c in ("partition", "run", "arrival_ts", "count"))
    order = np.lexsort((run, part, ts))
    before = np.empty_like(count)
    before[order] = np.cumsum(count[order]) - count[order]
    starts: RunStarts = {}
    for p in np.unique(part):
        mine = np.flatnonzero(part == p)
        mine = mine[np.argsort(run[mine])]
        starts[int(p)] = (run[mine], before[mine])
    return starts, int(count.sum())


def numbered_records(
    batches: Iterator[pa.RecordBatch], reader: str, lo: int, hi: int, batch_lines: int, starts: RunStarts
) -> Iterator[pa.RecordBatch]:
    """:func:`parse_records`'s rows, each with ``before``: the records ahead of its run in the batch.

    ``starts`` maps a partition to its runs (first offsets, sorted) and the records before each,
    as the driver ranked them.
    """
    for b in parse_records(batches, reader, lo, hi, batch_lines):
        part, run = b.column("partition").to_numpy(), b.column("run").to_numpy()
        before = np.empty(b.num_rows, dtype=np.int64)
        for p in np.unique(part):
            runs, ahead = starts[int(p)]
            mine = part == p
            before[mine] = ahead[np.searchsorted(runs, run[mine])]
        yield pa.RecordBatch.from_arrays([*b.columns, pa.array(before)], schema=NUMBERED_SCHEMA)


def _ahead_of_arrival(
    accepted: pa.Table, quarantined: pa.Table, arrival_us: npt.NDArray[np.int64], skew_us: int
) -> tuple[pa.Table, pa.Table]:
    """Move the rows whose event time is more than ``skew_us`` after their log-append time to the rejects.

    A record cannot have happened after the broker stored it, beyond the senders' clock skew; such
    an event time (a sender's clock years ahead) would hold every later record's lateness hostage.
    """
    ahead = accepted.column("event_ts").to_numpy() - arrival_us > skew_us
    if not ahead.any():
        return accepted, quarantined
    moved = accepted.filter(pa.array(ahead))
    gaps = (moved.column("event_ts").to_numpy() - arrival_us[ahead]) / 1e6
    rejects = pa.table(
        {
            "line_no": moved.column("line_no"),
            "raw_line": moved.column("raw_line"),
            "reason": pa.array(["arrival_before_event"] * moved.num_rows, pa.string()),
            "detail": pa.array(
                [f"the log-append time is {g:g} s before the event time, more than the "
                 f"max_clock_skew_s of {skew_us / 1e6:g}" for g in gaps.tolist()], pa.string()
            ),
        },
        schema=REJECT_SCHEMA,
    )  # fmt: skip
    both = pa.concat_tables([quarantined.cast(REJECT_SCHEMA), rejects])
    both = both.take(pa.array(np.argsort(both.column("line_no").to_numpy(), kind="stable")))
    return accepted.filter(pa.array(~ahead)), both


RUN_BEFORE_SCHEMA = pa.schema(
    [("partition", pa.int64()), ("run", pa.int64()), ("task", pa.int64()), ("within", pa.int64()),
     ("count", pa.int64())]
)  # fmt: skip


def runs_before(batches: Iterator[pa.RecordBatch], task: int) -> Iterator[pa.RecordBatch]:
    """Runs sorted by (time, partition, first offset), one task's share: records before each run in it.

    ``within`` counts the records of the task's earlier runs; the driver adds the earlier tasks'.
    """
    carry = 0
    for b in batches:
        count = b.column("count").to_numpy()
        within = np.cumsum(count) - count + carry
        carry += int(count.sum())
        yield pa.RecordBatch.from_pydict(
            {"partition": b.column("partition"), "run": b.column("run"),
             "task": pa.array(np.full(b.num_rows, task, dtype=np.int64)), "within": pa.array(within),
             "count": b.column("count")},
            schema=RUN_BEFORE_SCHEMA,
        )  # fmt: skip
