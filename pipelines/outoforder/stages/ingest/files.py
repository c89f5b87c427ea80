"""Ingest stage: raw files -> bronze arrivals + quarantine + ingest log, in Spark tasks, idempotently.

The driver plans; Spark tasks read, hash and parse (functions in
:mod:`outoforder.stages.ingest.tasks`); Delta's writer appends. For a set of files, in this order:

1. **identify** (a task per file): size, SHA-256, gzip or not. The content hash gives each file
   an ``ingest_id``; a file whose ingest log has a ``done`` row is skipped ("already ingested").
2. **claim**: every other file gets a ``started`` row in the ingest log claiming the next file
   ordinal (one MERGE for all), before any data is written; a crashed attempt's claim is reused.
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
import math
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import ConfigError, InputError
from outoforder.io import delta
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.files import remove_stale_staging, remove_tree, staging_name, staging_uri
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE, SEQ_PER_FILE
from outoforder.sources.declaration import Declaration
from outoforder.sources.declared import DeclaredReader
from outoforder.sources.declared_checks import check_fields, check_sample, header_fields
from outoforder.sources.parsing import ACROSS_FILES, WITHIN_FILE
from outoforder.sources.readers import READERS
from outoforder.spark.estimates import parallelism
from outoforder.stages.ingest import tasks

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


@dataclass(frozen=True)
class FileSpec:
    """One file to ingest: where it is (a local path or an s3a:// URI), its reader and source."""

    path: str
    reader: str
    source: str
    origin: str | None = None  # what the ingest log records as its path (a landing object's URI)


@dataclass
class PlannedFile:
    """A file (or a Kafka batch) an ingest writes: what it is, and what the plan decided for it."""

    idx: int  # among the files this ingest writes (what the tasks' rows carry)
    spec: FileSpec
    uri: str
    size: int = 0
    sha256: str = ""
    gz: bool = False
    ordinal: int = -1
    parts: list[int] = field(default_factory=list)
    reader: str = ""  # what the tasks build their reader from: a built-in's name or a declared reader's spec
    parquet: bool = False  # read as one part, its rows as JSON lines
    key: str = ""  # what identifies the content when it is not a file's hash (a Kafka batch's ranges)

    @property
    def ingest_id(self) -> str:
        """The idempotence key: the source and the content's identity."""
        return f"{self.spec.source}@{self.key or self.sha256[:20]}"

    @property
    def shown(self) -> str:
        """What the ingest log records as its path."""
        return self.spec.origin or self.uri


def check_reader(settings: Settings, name: str) -> None:
    """Fail, listing the known ones, unless ``name`` is a built-in reader or a declared source."""
    if name not in READERS and name not in settings.sources:
        declared = ", ".join(sorted(settings.sources)) or "none (add a [sources.<name>] table to your config)"
        msg = f"unknown reader {name!r}; built-in: {', '.join(sorted(READERS))}; declared: {declared}"
        raise ConfigError(msg)


def _uri(path: str, settings: Settings) -> str:
    """A local path made absolute, or a URI; the file must exist (a missing one fails before any work)."""
    from outoforder.io.files import file_size

    uri = path if "://" in path else str(Path(path).resolve())
    file_size(uri, settings.storage)  # raises InputError naming the file
    return uri


def _arrow_df(spark: SparkSession, rows: list[dict[str, Any]], fields: list[tuple[str, Any]]) -> DataFrame:
    """A DataFrame of ``rows`` with one row per partition (each becomes its own task).

    The rows are numbered and range-partitioned on their number into as many partitions as rows:
    every number is then a partition bound, so each partition holds exactly one row.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import LongType, StructField, StructType

    schema = from_arrow_schema(pa.schema(fields))
    numbered = StructType([StructField("_task", LongType(), False), *schema.fields])
    names = [name for name, _ in fields]
    data = [(i, *(r[n] for n in names)) for i, r in enumerate(rows)]
    return spark.createDataFrame(data, numbered).repartitionByRange(max(len(rows), 1), "_task").drop("_task")


def _spark_schema(schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _identify(
    spark: SparkSession, settings: Settings, files: list[PlannedFile], misfits: dict[str, str] | None = None
) -> None:
    """Each file's size, hash and gzip flag; a declared source's file is checked against its declaration.

    The check reads the file's first lines (from the same task), so a declaration that does not fit
    the data fails here, before any claim or write; with ``misfits``, such a file's reason is put
    there (by its path) instead, and the other files go on.
    """
    storage = settings.storage
    declared = settings.sources
    rows = [
        {
            "file_idx": f.idx,
            "uri": f.uri,
            "format": declared[f.spec.reader].format if f.spec.reader in declared else "",
        }
        for f in files
    ]
    fields = [("file_idx", _pa().int64()), ("uri", _pa().string()), ("format", _pa().string())]
    got = (
        _arrow_df(spark, rows, fields)
        .mapInArrow(lambda it: tasks.identify(it, storage), _spark_schema(tasks.IDENTITY_SCHEMA))
        .collect()
    )
    for r in got:
        f = files[r["file_idx"]]
        f.size, f.sha256, f.gz = int(r["size"]), str(r["sha256"]), bool(r["gz"])
        if r["head"] is not None:
            decl = declared[f.spec.reader]
            f.parquet = decl.format == "parquet"
            try:
                f.reader = _declared_reader(decl, list(r["head"]), f.shown).spec()
            except InputError as e:
                if misfits is None:
                    raise
                misfits[f.spec.path] = str(e)


def _declared_reader(decl: Declaration, head: list[str], where: str) -> DeclaredReader:
    """The reader of one file of a declared source, checked on the file's first lines (or rows)."""
    data = head[1:] if decl.format == "csv" and decl.header else head
    fields = (header_fields(decl, head[0]) if head else ()) or decl.columns or decl.columns_used()
    check_fields(decl, fields, where)
    reader = DeclaredReader(decl, fields)
    check_sample(reader, data, where)
    return reader


def _pa() -> Any:
    import pyarrow as pa

    return pa


def claim_ordinals(spark: SparkSession, settings: Settings, files: list[PlannedFile], now: int) -> None:
    """Each file's ordinal: the one a crashed attempt claimed, else the next free one (claimed now).

    The claims are committed to the ingest log before any data, so two files never share sequence
    numbers however attempts interleave: a claim is a MERGE keyed on the ordinal, so of two ingests
    that picked the same free ordinal one inserts and the other inserts nothing (and tries the next
    ones); two MERGEs committing at once conflict in Delta (one retries).
    """
    from pyspark.sql import functions as F

    todo = {f.ingest_id: f for f in files}
    while True:
        started = delta.read(spark, INGEST_LOG, settings.lake_root).where(F.col("status") == "started")
        mine = (
            started.where(F.col("ingest_id").isin(list(todo))).select("ingest_id", "file_ordinal").collect()
        )
        for r in mine:
            todo.pop(r["ingest_id"]).ordinal = int(r["file_ordinal"])
        if not todo:
            return
        top = started.agg(F.max("file_ordinal")).first()
        first = 0 if top is None or top[0] is None else int(top[0]) + 1
        claims = [
            (f.ingest_id, "started", first + i, f.spec.source, f.shown, f.sha256, f.size, f.spec.reader,
             0, 0, 0, 0, 0, 0, None, None, now)
            for i, f in enumerate(todo.values())
        ]  # fmt: skip
        delta.merge_new(
            spark.createDataFrame(claims, INGEST_LOG.schema),
            INGEST_LOG,
            settings.lake_root,
            ("status", "file_ordinal"),
        )


def _part_rows(settings: Settings, files: list[PlannedFile]) -> list[dict[str, Any]]:
    ing = settings.ingest
    rows: list[dict[str, Any]] = []
    for f in files:
        lo, hi = ing.plausible_range(f.spec.reader)
        bounds = [(0, -1)]
        if not f.gz and not f.parquet and f.size > ing.part_bytes:
            n = math.ceil(f.size / ing.part_bytes)
            bounds = [(i * ing.part_bytes, min((i + 1) * ing.part_bytes, f.size)) for i in range(n)]
        for start, end in bounds:
            f.parts.append(len(rows))
            rows.append(
                {
                    "part": len(rows), "file_idx": f.idx, "uri": f.uri, "gz": f.gz, "start": start,
                    "end": end,
                    "first_line": 1, "reader": f.reader or f.spec.reader, "lo": lo, "hi": hi,
                    "max_line_bytes": ing.max_line_bytes, "batch_lines": ing.batch_rows,
                    "ingest_id": f.ingest_id, "source": f.spec.source,
                    "shown": f.shown,
                    "base": f.ordinal * SEQ_PER_FILE, "local": False,
                    "parquet": f.parquet, "suspects": None,
                }
            )  # fmt: skip
    return rows


def _sources_with_history(spark: SparkSession, settings: Settings, files: list[PlannedFile]) -> set[str]:
    """Sources for which an earlier ingest (a file not among ``files``) claimed an ordinal."""
    from pyspark.sql import functions as F

    ids = [f.ingest_id for f in files]
    sources = sorted({f.spec.source for f in files})
    rows = (
        delta.read(spark, INGEST_LOG, settings.lake_root)
        .where(F.col("source").isin(sources) & ~F.col("ingest_id").isin(ids))
        .select("source")
        .distinct()
        .collect()
    )
    return {r["source"] for r in rows}


def _suspects(
    spark: SparkSession,
    settings: Settings,
    files: list[PlannedFile],
    rows: list[dict[str, Any]],
    history: set[str],
) -> DataFrame | None:
    """The hash pass over the sources that need it; sets every part's ``first_line`` and ``local``.

    Returns the suspects (``source``, ``row_hash``, ``in_bronze``): hashes of lines that could be
    accepted which this ingest holds twice, or which bronze holds from an earlier ingest; None
    when no source needs the pass. Only hash blobs and suspects cross the network.
    """
    from pyspark.sql import functions as F

    by_source: dict[str, list[PlannedFile]] = defaultdict(list)
    for f in files:
        by_source[f.spec.source].append(f)
    needs = {s for s, fs in by_source.items() if len(fs) > 1 or len(fs[0].parts) > 1 or s in history}
    for f in files:
        for p in f.parts:
            rows[p]["local"] = f.spec.source not in needs
    scan = [r for r in rows if not r["local"]]
    if not scan:
        return None
    storage = settings.storage
    t0 = time.monotonic()
    hashed = (
        _arrow_df(spark, scan, tasks.PART_FIELDS)
        .mapInArrow(lambda it: tasks.hash_pass(it, storage), _spark_schema(tasks.HASH_SCHEMA))
        .localCheckpoint()
    )
    lines = {
        int(r["part"]): int(r["lines"]) for r in hashed.where("bucket < 0").select("part", "lines").collect()
    }
    for f in files:
        first = 1
        for p in f.parts:
            rows[p]["first_line"] = first
            first += lines.get(p, 0)
    source_of = spark.createDataFrame([(r["part"], r["source"]) for r in scan], "part long, source string")
    blobs = (
        hashed.where("bucket >= 0")
        .join(F.broadcast(source_of), "part")
        .select("source", "bucket", "hashes", F.lit("new").alias("origin"))
    )
    earlier = sorted(history & needs)
    if earlier:
        ids = [f.ingest_id for f in files]
        bronze = (
            delta.read(spark, BRONZE, settings.lake_root)
            .where(F.col("source").isin(earlier) & ~F.col("ingest_id").isin(ids))
            .select("source", "row_hash")
            .mapInArrow(tasks.bronze_buckets, "source string, bucket long, hashes binary")
        )
        blobs = blobs.unionByName(bronze.withColumn("origin", F.lit("bronze")))
    suspects = (
        blobs.repartition("source", "bucket")
        .mapInArrow(tasks.find_suspects, _spark_schema(tasks.SUSPECT_SCHEMA))
        .localCheckpoint()
    )
    log.info("[ingest] hash pass over %d parts: %s lines, %.1f s", len(scan), f"{sum(lines.values()):,}",
             time.monotonic() - t0)  # fmt: skip
    return suspects


def _decide(rows: DataFrame, suspects: DataFrame, ordinal_of: DataFrame) -> DataFrame:
    """Suspect rows with ``keep`` and, for the others, the duplicate's detail and quarantined raw line."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    s = rows.join(F.broadcast(ordinal_of), "file_idx").join(suspects, ["source", "row_hash"], "left")
    same = Window.partitionBy("source", "row_hash", "file_idx")
    everywhere = Window.partitionBy("source", "row_hash")
    s = s.withColumn("earlier_line", F.col("arrival_seq") > F.min("arrival_seq").over(same))
    s = s.withColumn(
        "earlier_file",
        F.coalesce(F.col("in_bronze"), F.lit(False)) | (F.col("ordinal") > F.min("ordinal").over(everywhere)),
    )
    return s.select(
        "*",
        (~F.col("earlier_line") & ~F.col("earlier_file")).alias("keep"),
        F.when(F.col("earlier_line"), F.lit(WITHIN_FILE)).otherwise(F.lit(ACROSS_FILES)).alias("dup_detail"),
        F.when(F.col("earlier_line"), F.substring("raw_line", 1, 4096))
        .otherwise(F.col("raw_line"))
        .alias("dup_raw"),
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
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    for s in specs:
        check_reader(settings, s.reader)  # an unknown reader fails before anything is read
    files = [PlannedFile(i, s, _uri(s.path, settings)) for i, s in enumerate(specs)]
    if not files:
        return []
    lake = settings.lake_root
    for table in (BRONZE, QUARANTINE, INGEST_LOG):
        delta.ensure(spark, table, lake)
    _identify(spark, settings, files, misfits)
    if misfits:
        files = [f for f in files if f.spec.path not in misfits]
        for i, f in enumerate(files):
            f.idx = i
        if not files:
            return []
    ids = [f.ingest_id for f in files]
    done = {
        r["ingest_id"]
        for r in delta.read(spark, INGEST_LOG, lake)
        .where((F.col("status") == "done") & F.col("ingest_id").isin(ids))
        .select("ingest_id")
        .collect()
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
        claim_ordinals(spark, settings, todo, now)
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
    rows = _part_rows(settings, files)
    megabytes = sum(f.size for f in files) / 1e6
    log.info("[ingest] %d files (%.1f MB) in %d parts", len(files), megabytes, len(rows))
    suspects = _suspects(spark, settings, files, rows, _sources_with_history(spark, settings, files))

    started = time.time()
    gone = remove_stale_staging(lake, storage, "ingest", STALE_STAGING_S, started)
    if gone:
        log.warning("[ingest] removed %d staging folders killed ingests left: %s", len(gone), ", ".join(gone))
    t1 = time.monotonic()
    if suspects is None or suspects.isEmpty():
        return _one_pass(spark, settings, files, rows, now, t0, t1)
    per_source = suspects.groupBy("source").agg(F.collect_list("row_hash").alias("suspects"))
    parts = (
        _arrow_df(spark, [{**r, "suspects": None} for r in rows], tasks.PART_FIELDS)
        .drop("suspects")
        .join(F.broadcast(per_source), "source", "left")
        .select(*[name for name, _ in tasks.PART_FIELDS])
    )
    # Parsed once and staged under the lake until every file's rows are committed, one folder per
    # file: each file's append then reads its own rows only (a cached frame would be read whole
    # for every file), and no heap holds the batch (a large ingest cached in memory ran the Spark
    # Connect server out of heap, and it died).
    staging = staging_uri(lake, staging_name("ingest", started))
    schema = _spark_schema(tasks.PARSE_SCHEMA)
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
        decided = _decide(held, suspects, meta.select("file_idx", "ordinal")).persist(StorageLevel.DISK_ONLY)
        accepted = accepted.unionByName(decided.where("keep").select(*bronze_cols))
        dup_rows = decided.where(~F.col("keep")).select(
            "file_idx", "line_no", F.col("dup_raw").alias("raw_line"), F.lit("duplicate_row").alias("reason"),
            F.col("dup_detail").alias("detail"),
        )  # fmt: skip
        rejects = rejects.unionByName(dup_rows)
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
                bronze.where(mine), BRONZE, lake, f.ingest_id, 0, storage, options=bronze_options(settings)
            )
        if reasons[f.idx]:
            delta.append_once(quarantine.where(mine), QUARANTINE, lake, f.ingest_id, 0, storage)

    _side_by_side(spark, files, commit_file)
    summaries = _finish(spark, settings, files, counts, reasons, seq_range, now, t0)
    if decided is not None:
        decided.unpersist()
    return summaries


def _side_by_side(spark: SparkSession, files: list[PlannedFile], work: Callable[[PlannedFile], None]) -> None:
    """``work`` for every file, as many at a time as Spark has cores.

    A file's rows are a job of one task or a few, and its commits are its own (blind appends do
    not conflict): the files side by side keep every core busy.
    """
    with ThreadPoolExecutor(max(1, min(parallelism(spark), len(files)))) as pool:
        list(pool.map(work, files))


def _finish(
    spark: SparkSession,
    settings: Settings,
    files: list[PlannedFile],
    counts: dict[int, dict[str, int]],
    reasons: dict[int, dict[str, int]],
    seq_range: dict[int, tuple[int, int]],
    now: int,
    t0: float,
) -> list[IngestSummary]:
    """Every file's ``done`` row in the ingest log (one MERGE), and its summary."""
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
    delta.merge_new(
        spark.createDataFrame(done_rows, INGEST_LOG.schema),
        INGEST_LOG,
        settings.lake_root,
        ("ingest_id", "status"),
    )
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
    return _finish(spark, settings, files, counts, reasons, seq_range, now, t0)


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
    parsed = _arrow_df(spark, parts, tasks.PART_FIELDS).mapInArrow(
        lambda it: tasks.parse_pass(it, storage), _spark_schema(tasks.PARSE_SCHEMA)
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
