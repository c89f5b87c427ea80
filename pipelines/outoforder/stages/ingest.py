"""Ingest stage: raw files -> bronze arrivals + quarantine + ingest log, idempotently.

Per file: the content hash gives an ``ingest_id``; a file whose ingest_id is in the ingest log is
skipped ("already ingested"). Otherwise the file is read in bounded batches; each batch gets the
next arrival sequence numbers (file order = receive order), loses rows whose content a previous
file of the same source already delivered (quarantined as ``duplicate_row``), and is appended to
bronze and quarantine with Delta transaction ids (ingest_id, batch number). A crash half-way is
therefore resumed by simply running the stage again: committed batches are skipped by Delta,
the sequence numbers are re-derived identically, and the ingest-log row is written last.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.errors import InputError
from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
from outoforder.sources.readers import make_reader, read_file


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


def _first_seq(spark: SparkSession, settings: Settings, ingest_id: str) -> int:
    """Where this file's sequence numbers start: reuse a crashed attempt's, else after the max."""
    bronze = delta.read(spark, BRONZE, settings.lake_root)
    row = bronze.agg(
        F.min(F.when(F.col("ingest_id") == ingest_id, F.col("arrival_seq"))).alias("mine"),
        F.max("arrival_seq").alias("top"),
    ).first()
    assert row is not None
    if row["mine"] is not None:
        # A previous attempt committed some batches; batch 0 holds the file's first number.
        return int(row["mine"])
    return 0 if row["top"] is None else int(row["top"]) + 1


def _with_constants(table: pa.Table, **columns: str) -> pa.Table:
    for name, value in columns.items():
        table = table.append_column(name, pa.array([value] * table.num_rows, pa.string()))
    return table


def ingest_file(
    spark: SparkSession,
    settings: Settings,
    path: Path,
    reader_name: str,
    source: str,
    now_us: int | None = None,
) -> IngestSummary:
    """Ingest one file into bronze; idempotent (see module docstring)."""
    t0 = time.monotonic()
    path = path.resolve()
    if not path.is_file():
        msg = f"no such file: {path}"
        raise InputError(msg)
    reader = make_reader(reader_name)
    sha, size = file_sha256(path)
    ingest_id = f"{source}@{sha[:20]}"
    for table in (BRONZE, QUARANTINE, INGEST_LOG):
        delta.ensure(spark, table, settings.lake_root)
    log = delta.read(spark, INGEST_LOG, settings.lake_root)
    if log.where(F.col("ingest_id") == ingest_id).limit(1).count():
        return IngestSummary(source, str(path), ingest_id, True, 0, 0, 0, 0, {}, 0.0)

    bronze = delta.read(spark, BRONZE, settings.lake_root)
    prior: DataFrame | None = bronze.where(
        (F.col("source") == source) & (F.col("ingest_id") != ingest_id)
    ).select("row_hash")
    if prior is not None and not prior.limit(1).count():
        prior = None  # first file of this source: nothing to dedupe
    first_seq = seq = _first_seq(spark, settings, ingest_id)
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
        acc = acc.append_column("arrival_seq", pa.array(range(seq, seq + acc.num_rows), pa.int64()))
        seq += acc.num_rows
        acc = _with_constants(acc, source=source, ingest_id=ingest_id, source_file=str(path))
        rejects = _with_constants(
            batch.quarantined, source=source, ingest_id=ingest_id, source_file=str(path)
        )
        for r in batch.quarantined.column("reason").to_pylist():
            reasons[r] = reasons.get(r, 0) + 1
        staged = spark.createDataFrame(acc) if acc.num_rows else None
        rejected = spark.createDataFrame(rejects) if rejects.num_rows else None
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
        if rejected is not None:
            delta.append_once(rejected, QUARANTINE, settings.lake_root, ingest_id, batch_no)
        print(f"[ingest] {source}: {counts.lines:,} lines read ({time.monotonic() - t0:.1f} s)", flush=True)
    assert counts is not None
    accepted = counts.accepted - cross_dups
    quarantined = counts.quarantined + cross_dups
    now = now_us if now_us is not None else int(datetime.now(UTC).timestamp() * 1_000_000)
    log_row = spark.createDataFrame(
        [
            (
                ingest_id,
                source,
                str(path),
                sha,
                size,
                reader.name,
                counts.lines,
                counts.header_lines,
                counts.blank_lines,
                counts.rows_read,
                accepted,
                quarantined,
                first_seq if seq > first_seq else None,
                seq - 1 if seq > first_seq else None,
                now,
            )
        ],
        INGEST_LOG.schema,
    )
    delta.append_once(log_row, INGEST_LOG, settings.lake_root, ingest_id, 0)
    return IngestSummary(
        source,
        str(path),
        ingest_id,
        False,
        counts.lines,
        counts.rows_read,
        accepted,
        quarantined,
        reasons,
        time.monotonic() - t0,
    )
