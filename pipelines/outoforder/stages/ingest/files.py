"""Ingest stage: raw files -> bronze arrivals + quarantine + ingest log, idempotently.

Per file: the content hash gives an ``ingest_id``; a file with a ``done`` row in the ingest log is
skipped ("already ingested"). Otherwise a ``started`` row claims the next file ordinal (before any
data is written), and the file is read in bounded batches. Each row gets
``arrival_seq = file_ordinal * SEQ_PER_FILE + line_no`` (file order = receive order); rows whose
content an earlier file of the same source already delivered are quarantined as
``duplicate_row``; each batch is appended to bronze and quarantine with Delta transaction ids
(ingest_id, batch number). A crash half-way is resumed by running the stage again: the claimed
ordinal is reused, committed batches are skipped by Delta, the numbers come out the same, and the
``done`` row with the file's counts is written last.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.errors import InputError
from outoforder.io import delta
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE, SEQ_PER_FILE
from outoforder.sources.readers import make_reader, read_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestSummary:
    """What one file contributed (or that it was skipped)."""

    source: str
    path: str
    ingest_id: str
    skipped: bool
    lines: int
    rows_read: int
    accepted: int
    quarantined: int
    reasons: dict[str, int]
    seconds: float

    def line(self) -> str:
        """The one-line summary printed per file."""
        name = Path(self.path).name
        if self.skipped:
            return f"[ingest] {self.source} <- {name}: already ingested ({self.ingest_id}), nothing to do"
        why = ", ".join(f"{k}={v}" for k, v in sorted(self.reasons.items())) or "none"
        return (
            f"[ingest] {self.source} <- {name}: {self.rows_read:,} rows read = "
            f"{self.accepted:,} accepted + {self.quarantined:,} quarantined ({why}); "
            f"{self.seconds:.1f} s"
        )


def file_sha256(path: Path) -> tuple[str, int]:
    """Content hash and size of a file."""
    h = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
                size += len(block)
    except OSError as e:
        msg = f"cannot read {path}: {e}"
        raise InputError(msg) from e
    return h.hexdigest(), size


def _claim_ordinal(spark: SparkSession, settings: Settings, ingest_id: str, row: tuple[object, ...]) -> int:
    """The file's ordinal: the one a crashed attempt claimed, else the next free one (claimed now).

    The claim is committed to the ingest log before any data, so two files can never share
    sequence numbers, however attempts interleave: the claim is a MERGE keyed on the ordinal, so
    of two ingests that picked the same free ordinal, one inserts and the other inserts nothing
    (it then takes the next one), and two MERGEs committing at once conflict in Delta (one retries).
    """
    while True:
        log = delta.read(spark, INGEST_LOG, settings.lake_root).where(F.col("status") == "started")
        mine = log.where(F.col("ingest_id") == ingest_id).first()
        if mine is not None:
            return int(mine["file_ordinal"])
        top = log.agg(F.max("file_ordinal")).first()
        ordinal = 0 if top is None or top[0] is None else int(top[0]) + 1
        claim = spark.createDataFrame([(ingest_id, "started", ordinal, *row)], INGEST_LOG.schema)
        if delta.merge_new(claim, INGEST_LOG, settings.lake_root, ("status", "file_ordinal")):
            return ordinal


def _seq_range(df: DataFrame) -> tuple[int | None, int | None]:
    got = df.agg(F.min("arrival_seq"), F.max("arrival_seq")).first()
    return (None, None) if got is None or got[0] is None else (int(got[0]), int(got[1]))


def _seq_range_arrow(table: pa.Table) -> tuple[int | None, int | None]:
    if table.num_rows == 0:
        return None, None
    col = table.column("arrival_seq")
    return int(pa.compute.min(col).as_py()), int(pa.compute.max(col).as_py())


def _with_constants(table: pa.Table, **columns: str) -> pa.Table:
    for name, value in columns.items():
        table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()))
    return table


@retry_on_conflict
def ingest_file(
    spark: SparkSession,
    settings: Settings,
    path: Path,
    reader_name: str,
    source: str,
    now_us: int | None = None,
    origin: str | None = None,
) -> IngestSummary:
    """Ingest one file into bronze; idempotent (see module docstring).

    ``origin`` is what the ingest log records as the file's path when ``path`` is a local copy
    (a landing-zone object's URI).
    """
    t0 = time.monotonic()
    path = path.resolve()
    if not path.is_file():
        msg = f"no such file: {path}"
        raise InputError(msg)
    shown = origin or str(path)
    reader = make_reader(reader_name)
    sha, size = file_sha256(path)
    ingest_id = f"{source}@{sha[:20]}"
    for table in (BRONZE, QUARANTINE, INGEST_LOG):
        delta.ensure(spark, table, settings.lake_root)
    ingest_log = delta.read(spark, INGEST_LOG, settings.lake_root)
    done = ingest_log.where((F.col("ingest_id") == ingest_id) & (F.col("status") == "done"))
    if done.limit(1).count():
        return IngestSummary(source, shown, ingest_id, True, 0, 0, 0, 0, {}, 0.0)
    now = now_us if now_us is not None else int(datetime.now(UTC).timestamp() * 1_000_000)
    claim_row = (source, shown, sha, size, reader.name, 0, 0, 0, 0, 0, 0, None, None, now)
    base = _claim_ordinal(spark, settings, ingest_id, claim_row) * SEQ_PER_FILE

    bronze = delta.read(spark, BRONZE, settings.lake_root)
    prior: DataFrame | None = bronze.where(
        (F.col("source") == source) & (F.col("ingest_id") != ingest_id)
    ).select("row_hash")
    if prior is not None and not prior.limit(1).count():
        prior = None  # first file of this source: nothing to dedupe
    first_seq: int | None = None
    last_seq: int | None = None
    reasons: dict[str, int] = {}
    cross_dups = 0
    counts = None
    for batch_no, batch in enumerate(
        read_file(
            path,
            reader,
            settings.ingest.plausible_range(reader.name),
            settings.ingest.batch_rows,
            settings.ingest.max_line_bytes,
        )
    ):
        counts = batch.counts
        acc = batch.accepted
        seqs = pa.compute.add(acc.column("line_no"), pa.scalar(base, pa.int64()))
        acc = acc.append_column("arrival_seq", seqs)
        acc = _with_constants(acc, source=source, ingest_id=ingest_id, source_file=shown)
        rejects = _with_constants(batch.quarantined, source=source, ingest_id=ingest_id, source_file=shown)
        for r in batch.quarantined.column("reason").to_pylist():
            reasons[r] = reasons.get(r, 0) + 1
        staged = spark.createDataFrame(acc) if acc.num_rows else None
        rejected = spark.createDataFrame(rejects) if rejects.num_rows else None
        dups = None
        n_dups = 0
        if staged is not None and prior is not None:
            dups = staged.join(prior, "row_hash", "left_semi").cache()
            n_dups = dups.count()
            if n_dups:
                cross_dups += n_dups
                reasons["duplicate_row"] = reasons.get("duplicate_row", 0) + n_dups
                dup_rows = dups.select(
                    "source",
                    "ingest_id",
                    "source_file",
                    "line_no",
                    "raw_line",
                    F.lit("duplicate_row").alias("reason"),
                    F.lit("same content as a row of an earlier file of this source").alias("detail"),
                )
                rejected = dup_rows if rejected is None else rejected.unionByName(dup_rows)
                staged = staged.join(prior, "row_hash", "left_anti")
        if staged is not None:
            delta.append_once(staged, BRONZE, settings.lake_root, ingest_id, batch_no)
            lo, hi = _seq_range(staged) if n_dups else _seq_range_arrow(acc)
            if lo is not None:
                first_seq = lo if first_seq is None else first_seq
                last_seq = hi
        if rejected is not None:
            delta.append_once(rejected, QUARANTINE, settings.lake_root, ingest_id, batch_no)
        if dups is not None:
            dups.unpersist()  # only after both writes: they read it
        log.info("[ingest] %s: %s lines read (%.1f s)", source, f"{counts.lines:,}", time.monotonic() - t0)
    if counts is None:  # read_file yields at least one batch, even for an empty file
        msg = f"reading {path} produced no batch at all"
        raise InputError(msg)
    accepted = counts.accepted - cross_dups
    quarantined = counts.quarantined + cross_dups
    done_row = (
        ingest_id,
        "done",
        base // SEQ_PER_FILE,
        source,
        shown,
        sha,
        size,
        reader.name,
        counts.lines,
        counts.header_lines,
        counts.blank_lines,
        counts.rows_read,
        accepted,
        quarantined,
        first_seq,
        last_seq,
        now,
    )
    log_row = spark.createDataFrame([done_row], INGEST_LOG.schema)
    delta.append_once(log_row, INGEST_LOG, settings.lake_root, ingest_id, 1)
    return IngestSummary(
        source,
        shown,
        ingest_id,
        False,
        counts.lines,
        counts.rows_read,
        accepted,
        quarantined,
        reasons,
        time.monotonic() - t0,
    )
