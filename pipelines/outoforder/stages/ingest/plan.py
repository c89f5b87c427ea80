"""The ingest's plan, before anything is written: files identified, checked, given ordinals and parts.

Steps 1 to 3 of :mod:`outoforder.stages.ingest.files`: a task per file reads its size, hash and
gzip flag (and, for a declared source, its first lines, checked against the declaration); the
files not ingested yet claim their ordinals in the ingest log; a plain file is cut into byte
ranges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import ConfigError, InputError
from outoforder.io.tables import INGEST_LOG, SEQ_PER_FILE
from outoforder.sources.declaration import Declaration
from outoforder.sources.declared import DeclaredReader
from outoforder.sources.declared_checks import check_fields, check_sample, header_fields
from outoforder.sources.readers import READERS
from outoforder.stages.ingest import tasks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.io.deltars import Filter


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


def file_uri(path: str, settings: Settings) -> str:
    """A local path made absolute, or a URI; the file must exist (a missing one fails before any work)."""
    from outoforder.io.files import file_size

    uri = path if "://" in path else str(Path(path).resolve())
    file_size(uri, settings.storage)  # raises InputError naming the file
    return uri


def arrow_df(spark: SparkSession, rows: list[dict[str, Any]], fields: list[tuple[str, Any]]) -> DataFrame:
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


def spark_schema(schema: Any) -> Any:
    """An Arrow schema as Spark's (for ``mapInArrow``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def identify(
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
        arrow_df(spark, rows, fields)
        .mapInArrow(lambda it: tasks.identify(it, storage), spark_schema(tasks.IDENTITY_SCHEMA))
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


def ingest_log(settings: Settings, filters: list[Filter], columns: list[str]) -> list[dict[str, Any]]:
    """The ingest log's rows matching ``filters`` (``columns`` of them), read on the driver: no Spark job.

    The log is small (a few rows per file or Kafka ordinal), and an ingest asks it a few questions
    before any data moves; through Spark each was a snapshot's state and a scan (a few seconds of the
    shared server's driver for a file of a few lines).
    """
    from outoforder.io import deltars

    rows = deltars.read_table(INGEST_LOG, settings.lake_root, settings.storage, filters, columns)
    return [] if rows is None else rows.to_pylist()


def claim_ordinals(settings: Settings, files: list[PlannedFile], now: int) -> None:
    """Each file's ordinal: the one a crashed attempt claimed, else the next free one (claimed now).

    The claims are committed to the ingest log before any data, so two files never share sequence
    numbers however attempts interleave: a claim is a MERGE keyed on the ordinal, so of two ingests
    that picked the same free ordinal one inserts and the other inserts nothing (and tries the next
    ones); two MERGEs committing at once conflict in Delta (one retries). Claims and reads run on
    the driver through delta-rs: no Spark job.
    """
    from outoforder.io import deltars

    todo = {f.ingest_id: f for f in files}
    while True:
        started = ingest_log(settings, [("status", "=", "started")], ["ingest_id", "file_ordinal"])
        for r in started:
            if r["ingest_id"] in todo:
                todo.pop(r["ingest_id"]).ordinal = int(r["file_ordinal"])
        if not todo:
            return
        first = max((int(r["file_ordinal"]) for r in started), default=-1) + 1
        claims = [
            (f.ingest_id, "started", first + i, f.spec.source, f.shown, f.sha256, f.size, f.spec.reader,
             0, 0, 0, 0, 0, 0, None, None, now)
            for i, f in enumerate(todo.values())
        ]  # fmt: skip
        keys = ("status", "file_ordinal")
        deltars.merge_new(INGEST_LOG, settings.lake_root, settings.storage, claims, keys)


def part_rows(settings: Settings, files: list[PlannedFile]) -> list[dict[str, Any]]:
    """One task row per part of every file (a plain file cut into ``ingest.part_bytes`` ranges)."""
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
