"""Ingest stage: raw files -> bronze arrivals + quarantine + ingest log, in Spark tasks, idempotently.

The driver plans; Spark tasks read, hash and parse (functions in
:mod:`outoforder.stages.ingest.tasks`); Delta's writer appends. For a set of files, in this order:

1. **identify** (a task per file): size, SHA-256, gzip or not. The content hash gives each file
   an ``ingest_id``; a file whose ingest log has a ``done`` row is skipped ("already ingested").
2. **claim**: every other file gets a ``started`` row in the ingest log claiming the next file
   ordinal (one MERGE for all, on the driver), before any data is written; a crashed claim is reused.
   A row's ``arrival_seq = file_ordinal * SEQ_PER_FILE + line_no``: receive order, fixed up front.
3. **parts**: a plain file is cut into byte ranges of ``ingest.part_bytes``, a gzip file is one
   part (see :mod:`outoforder.sources.lines`).
4. **hash pass** (a task per part), only when duplicates could cross a task's view: a source with
   several parts or files here, or rows from earlier ingests. Each part's line count (so later
   parts know their first line number) and the hash of every line that could be accepted. A
   hash seen twice in the source, or already in bronze for the source, is a *suspect*. A
   source with one part and no history skips it: its task drops its own repeated lines (the
   rule of 6).
5. **one pass**, when no row needs a decision across parts (no suspects): a job per file, the
   files side by side, reads, parses (:class:`~outoforder.sources.parsing.LineParser`) and
   appends the file's accepted rows to bronze with Delta's writer and the transaction id
   (``ingest_id``, 0), its counts observed in that write; a file with rejected lines is parsed
   again for them, and they go to quarantine likewise. Nothing is staged.
6. **parse pass** otherwise (a task per part, with its suspects): lines parsed into the part's
   accepted rows, counts, quarantined lines and suspect rows, staged as Parquet under the lake
   (``_staging/``, a folder per file) until the commits and removed after them, whatever
   happened; a folder a killed ingest left (older than :data:`STALE_STAGING_S`) is removed by
   the next ingest. Of the accepted rows with one content in one source, the first in arrival
   order is kept; later ones in the same file are quarantined as ``duplicate_row`` (an earlier
   line of this file), and so is every one whose content an earlier file or ingest delivered.
   Then per file, the files side by side, its accepted rows (read from its own staged folder) are
   appended to bronze, its quarantined lines likewise.
7. **done**: one MERGE of every file's ``done`` row with its counts. A crash anywhere is resumed
   by running the stage again: the claimed ordinals are reused, the numbers come out the same,
   and commits already made are skipped by their transaction ids (files a crashed write left
   unreferenced, VACUUM removes).

For every file: lines = header + blank + accepted + quarantined, and the ingest log, bronze and
quarantine agree (checked by the bronze suite, :mod:`outoforder.quality.bronze`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.io import delta, deltars
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.files import remove_stale_staging, remove_tree, staging_name, staging_uri
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
from outoforder.spark.estimates import parallelism
from outoforder.spark.session import side_by_side
from outoforder.stages.ingest import tasks
from outoforder.stages.ingest.duplicates import decide_duplicates, sources_with_history, suspects_of
from outoforder.stages.ingest.plan import (
    FileSpec,
    PlannedFile,
    arrow_df,
    check_reader,
    claim_ordinals,
    file_uri,
    identify,
    ingest_log,
    part_rows,
    spark_schema,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)
QUARANTINE_ROW_COLUMNS = ("line_no", "raw_line", "reason", "detail")  # besides the file's identity
# A staging folder older than this is a killed ingest's (a live one removes its own when it ends,
# and no ingest runs for a day): the next ingest deletes it
STALE_STAGING_S = 24 * 3600.0


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


@retry_on_conflict
def ingest_files(
    spark: SparkSession,
    settings: Settings,
    specs: list[FileSpec],
    now_us: int | None = None,
    misfits: dict[str, str] | None = None,
) -> list[IngestSummary]:
    """Ingest files into bronze in Spark tasks, idempotently (module docstring); a summary per file.

    A file that does not fit its source's declaration stops the whole call before anything is
    written, unless ``misfits`` is given: then that file is left out, its reason put there by its
    path, and the summaries are those of the other files, in order (what the landing zone does).
    """
    t0 = time.monotonic()
    for s in specs:
        check_reader(settings, s.reader)  # an unknown reader fails before anything is read
    files = [PlannedFile(i, s, file_uri(s.path, settings)) for i, s in enumerate(specs)]
    if not files:
        return []
    lake = settings.lake_root
    for table in (BRONZE, QUARANTINE, INGEST_LOG):
        delta.ensure(spark, table, lake)
    identify(spark, settings, files, misfits)
    if misfits:
        files = [f for f in files if f.spec.path not in misfits]
        for i, f in enumerate(files):
            f.idx = i
        if not files:
            return []
    ids = [f.ingest_id for f in files]
    done = {
        r["ingest_id"]
        for r in ingest_log(settings, [("status", "=", "done"), ("ingest_id", "in", ids)], ["ingest_id"])
    }
    todo: list[PlannedFile] = []
    for f in files:
        if f.ingest_id not in done and all(g.ingest_id != f.ingest_id for g in todo):
            todo.append(f)  # the same content twice in one call is ingested once
    skipped = IngestSummary
    summaries = {
        id(f): skipped(f.spec.source, f.shown, f.ingest_id, True, 0, 0, 0, 0, {}, 0.0)
        for f in files
        if f not in todo
    }
    if todo:
        now = now_us if now_us is not None else int(datetime.now(UTC).timestamp() * 1_000_000)
        for i, f in enumerate(todo):
            f.idx = i
        claim_ordinals(settings, todo, now)
        summaries |= {id(f): s for f, s in zip(todo, _ingest(spark, settings, todo, now, t0), strict=True)}
    return [summaries[id(f)] for f in files]


def bronze_options(settings: Settings) -> dict[str, str]:
    """Spark writer options of bronze's appends: files of at most ``ingest.file_rows`` rows.

    Row groups of about 8 MB: they are what Spark splits a file at when it reads it, so a large
    file is read by several tasks.
    """
    return {"maxRecordsPerFile": str(settings.ingest.file_rows), "parquet.block.size": str(8 << 20)}


def _ingest(
    spark: SparkSession, settings: Settings, files: list[PlannedFile], now: int, t0: float
) -> list[IngestSummary]:
    from pyspark.sql import functions as F

    lake, storage = settings.lake_root, settings.storage
    rows = part_rows(settings, files)
    megabytes = sum(f.size for f in files) / 1e6
    log.info("[ingest] %d files (%.1f MB) in %d parts", len(files), megabytes, len(rows))
    suspects = suspects_of(spark, settings, files, rows, sources_with_history(settings, files))

    started = time.time()
    gone = remove_stale_staging(lake, storage, "ingest", STALE_STAGING_S, started)
    if gone:
        log.warning("[ingest] removed %d staging folders killed ingests left: %s", len(gone), ", ".join(gone))
    t1 = time.monotonic()
    if suspects is None or suspects.isEmpty():
        return _one_pass(spark, settings, files, rows, now, t0, t1)
    per_source = suspects.groupBy("source").agg(F.collect_list("row_hash").alias("suspects"))
    parts = (
        arrow_df(spark, [{**r, "suspects": None} for r in rows], tasks.PART_FIELDS)
        .drop("suspects")
        .join(F.broadcast(per_source), "source", "left")
        .select(*[name for name, _ in tasks.PART_FIELDS])
    )
    # Parsed once and staged under the lake until every file's rows are committed, one folder per
    # file: each file's append then reads its own rows only (a cached frame would be read whole
    # for every file), and no heap holds the batch (a large ingest cached in memory ran the Spark
    # Connect server out of heap, and it died).
    staging = staging_uri(lake, staging_name("ingest", started))
    schema = spark_schema(tasks.PARSE_SCHEMA)
    try:
        parsed = parts.mapInArrow(lambda it: tasks.parse_pass(it, storage), schema)
        parsed.write.partitionBy("file_idx").parquet(staging)
        out = spark.read.schema(schema).parquet(staging)
        return _commit(spark, settings, files, out, suspects, now, t0, t1)
    finally:
        remove_tree(staging, storage)


def _commit(
    spark: SparkSession,
    settings: Settings,
    files: list[PlannedFile],
    out: DataFrame,
    suspects: DataFrame | None,
    now: int,
    t0: float,
    t1: float,
) -> list[IngestSummary]:
    """Each file's rows from the staged parse (``out``) into bronze and quarantine, then the ingest log."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    lake, storage = settings.lake_root, settings.storage
    counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in out.where(F.col("kind") == "counts").collect():
        for k in ("lines", "header_lines", "blank_lines"):
            counts[int(r["file_idx"])][k] += int(r[k])
    parsed = sum(c["lines"] for c in counts.values())
    log.info(
        "[ingest] parse pass: %s lines, %.0f lines/s",
        f"{parsed:,}",
        parsed / max(time.monotonic() - t1, 1e-9),
    )

    meta = spark.createDataFrame(
        [(f.idx, f.ordinal, f.spec.source, f.ingest_id, f.shown) for f in files],
        "file_idx long, ordinal long, source string, ingest_id string, source_file string",
    )
    bronze_cols = ["file_idx", *tasks.BRONZE_ROW_COLUMNS]
    accepted = out.where(F.col("kind") == "row").select(*bronze_cols)
    rejects = out.where(F.col("kind") == "reject").select("file_idx", *QUARANTINE_ROW_COLUMNS)
    decided = None
    if suspects is not None:
        held = out.where(F.col("kind") == "suspect").join(
            F.broadcast(meta.select("file_idx", "source")), "file_idx"
        )
        decided = decide_duplicates(held, suspects, meta.select("file_idx", "ordinal")).persist(
            StorageLevel.DISK_ONLY
        )
        accepted = accepted.unionByName(decided.where("keep").select(*bronze_cols))
        dup_rows = decided.where(~F.col("keep")).select(
            "file_idx", "line_no", F.col("dup_raw").alias("raw_line"), F.lit("duplicate_row").alias("reason"),
            F.col("dup_detail").alias("detail"),
        )  # fmt: skip
        rejects = rejects.unionByName(dup_rows)
    # in a finally: a failed ingest must not leave its frame cached in the long-lived server, where
    # every later write would plan against it
    try:
        with_meta = F.broadcast(meta.select("file_idx", "source", "ingest_id", "source_file"))
        bronze = accepted.join(with_meta, "file_idx")
        quarantine = rejects.join(with_meta, "file_idx")
        seq_range: dict[int, tuple[int, int]] = {}
        for r in (
            bronze.groupBy("file_idx").agg(F.count("*"), F.min("arrival_seq"), F.max("arrival_seq")).collect()
        ):
            counts[int(r[0])]["accepted"] = int(r[1])
            seq_range[int(r[0])] = (int(r[2]), int(r[3]))
        reasons: dict[int, dict[str, int]] = defaultdict(dict)
        for r in rejects.groupBy("file_idx", "reason").count().collect():
            reasons[int(r["file_idx"])][r["reason"]] = int(r["count"])

        def commit_file(f: PlannedFile) -> None:
            mine = F.col("file_idx") == f.idx
            if counts[f.idx]["accepted"]:
                delta.append_once(
                    bronze.where(mine),
                    BRONZE,
                    lake,
                    f.ingest_id,
                    0,
                    storage,
                    options=bronze_options(settings),
                )
            if reasons[f.idx]:
                delta.append_once(quarantine.where(mine), QUARANTINE, lake, f.ingest_id, 0, storage)

        _side_by_side(spark, files, commit_file)
        summaries = _finish(settings, files, counts, reasons, seq_range, now, t0)
    finally:
        if decided is not None:
            decided.unpersist()
    return summaries


def _side_by_side(spark: SparkSession, files: list[PlannedFile], work: Callable[[PlannedFile], None]) -> None:
    """``work`` for every file, as many at a time as Spark has cores.

    A file's rows are a job of one task or a few, and its commits are its own (blind appends do
    not conflict): the files side by side keep every core busy.
    """
    side_by_side(spark, work, files, min(parallelism(spark), len(files)))


def _finish(
    settings: Settings,
    files: list[PlannedFile],
    counts: dict[int, dict[str, int]],
    reasons: dict[int, dict[str, int]],
    seq_range: dict[int, tuple[int, int]],
    now: int,
    t0: float,
) -> list[IngestSummary]:
    """Every file's ``done`` row in the ingest log (one MERGE, on the driver), and its summary."""
    summaries, done_rows = [], []
    for f in files:
        c = counts[f.idx]
        n_quarantined = sum(reasons[f.idx].values())
        seqs = seq_range.get(f.idx)
        n = c["accepted"]
        done_rows.append(
            (f.ingest_id, "done", f.ordinal, f.spec.source, f.shown, f.sha256, f.size, f.spec.reader,
             c["lines"], c["header_lines"], c["blank_lines"], n + n_quarantined, n,
             n_quarantined, seqs[0] if seqs else None, seqs[1] if seqs else None, now)
        )  # fmt: skip
        summaries.append(
            IngestSummary(
                f.spec.source, f.shown, f.ingest_id, False, c["lines"], n + n_quarantined, n,
                n_quarantined, dict(reasons[f.idx]), time.monotonic() - t0,
            )
        )  # fmt: skip
    deltars.merge_new(INGEST_LOG, settings.lake_root, settings.storage, done_rows, ("ingest_id", "status"))
    return summaries


def _one_pass(
    spark: SparkSession,
    settings: Settings,
    files: list[PlannedFile],
    rows: list[dict[str, Any]],
    now: int,
    t0: float,
    t1: float,
) -> list[IngestSummary]:
    """No row waits for a decision across parts: every file parsed and appended in one job of its own.

    Nothing is staged; a file's counts are observed in its bronze write, and its rejects, if it has
    any, are parsed again for quarantine (what the Kafka path does with a batch).
    """
    counts: dict[int, dict[str, int]] = {}
    reasons: dict[int, dict[str, int]] = {}
    seq_range: dict[int, tuple[int, int]] = {}

    def one(f: PlannedFile) -> None:
        got, why, seqs = _parse_and_append(spark, settings, f, [r for r in rows if r["file_idx"] == f.idx])
        counts[f.idx], reasons[f.idx] = got, why
        if seqs is not None:
            seq_range[f.idx] = seqs

    _side_by_side(spark, files, one)
    parsed = sum(c["lines"] for c in counts.values())
    log.info(
        "[ingest] parse and append in one pass: %s lines, %.0f lines/s",
        f"{parsed:,}",
        parsed / max(time.monotonic() - t1, 1e-9),
    )
    return _finish(settings, files, counts, reasons, seq_range, now, t0)


def _parse_and_append(
    spark: SparkSession, settings: Settings, f: PlannedFile, parts: list[dict[str, Any]]
) -> tuple[dict[str, int], dict[str, int], tuple[int, int] | None]:
    """One file's parts parsed and appended to bronze (quarantine likewise).

    Returns its counts, its rejects' counts by reason, and its first and last ``arrival_seq`` in
    bronze (None without accepted rows).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    storage = settings.storage
    parsed = arrow_df(spark, parts, tasks.PART_FIELDS).mapInArrow(
        lambda it: tasks.parse_pass(it, storage), spark_schema(tasks.PARSE_SCHEMA)
    )
    row = F.col("kind") == "row"
    tallies = [
        *(F.sum(k).alias(k) for k in ("lines", "header_lines", "blank_lines")),
        F.count_if(row).alias("accepted"),
        F.count_if(F.col("kind") == "reject").alias("quarantined"),
        F.min(F.when(row, F.col("arrival_seq"))).alias("first_seq"),
        F.max(F.when(row, F.col("arrival_seq"))).alias("last_seq"),
    ]
    tally = Observation(f"ingest_{uuid.uuid4().hex}")
    ident = identity_columns(f.spec.source, f.ingest_id, f.shown)
    wrote = delta.append_once(
        parsed.observe(tally, *tallies).where(row).select(*ident, *tasks.BRONZE_ROW_COLUMNS),
        BRONZE,
        settings.lake_root,
        f.ingest_id,
        0,
        storage,
        options=bronze_options(settings),
    )
    if wrote:
        got = dict(tally.get)
    else:  # a rerun after a crash: bronze has the file's rows, the counts are taken again
        top = parsed.agg(*tallies).first()
        assert top is not None  # an aggregate without grouping has one row
        got = top.asDict()
    counts = {k: int(got[k] or 0) for k in ("lines", "header_lines", "blank_lines", "accepted")}
    why: dict[str, int] = {}
    if got["quarantined"]:
        rejected = parsed.where(F.col("kind") == "reject").select(*ident, *QUARANTINE_ROW_COLUMNS)
        why = quarantine(settings, rejected, f.ingest_id)
    seqs = (int(got["first_seq"]), int(got["last_seq"])) if counts["accepted"] else None
    return counts, why, seqs


def identity_columns(source: str, ingest_id: str, shown: str) -> list[Column]:
    """The columns naming where a bronze or quarantine row came from (its file or Kafka batch)."""
    from pyspark.sql import functions as F

    return [F.lit(source).alias("source"), F.lit(ingest_id).alias("ingest_id"),
            F.lit(shown).alias("source_file")]  # fmt: skip


def quarantine(settings: Settings, rejects: DataFrame, ingest_id: str) -> dict[str, int]:
    """An ingest's rejected lines (quarantine's columns) appended once; their counts by reason.

    ``rejects`` is computed once (checkpointed): counting and appending read the same rows.
    """
    held = rejects.localCheckpoint()
    reasons = {r["reason"]: int(r["count"]) for r in held.groupBy("reason").count().collect()}
    if reasons:
        delta.append_once(held, QUARANTINE, settings.lake_root, ingest_id, 0, settings.storage)
    return reasons


def ingest_file(
    spark: SparkSession,
    settings: Settings,
    path: Path | str,
    reader_name: str,
    source: str,
    now_us: int | None = None,
    origin: str | None = None,
) -> IngestSummary:
    """Ingest one file (see :func:`ingest_files`); ``origin`` is what the ingest log records as its path."""
    (summary,) = ingest_files(spark, settings, [FileSpec(str(path), reader_name, source, origin)], now_us)
    return summary
