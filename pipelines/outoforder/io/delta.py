"""Reading and writing Delta tables: the only module that touches storage.

Appends are idempotent through Delta's transaction identifiers (``txnAppId`` / ``txnVersion``): a
write tagged with an (app id, version) that the table has already committed is skipped by Delta
itself, so re-running a batch after a crash or a retry changes nothing. MERGE, DELETE and the
maintenance statements are Delta's SQL. Nothing here needs more of Spark than DataFrames and SQL,
so the same code runs on a classic session and as a client of the shared Spark Connect server
(no py4j, no Delta Python API, which Spark Connect lacks).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import delta.exceptions  # noqa: F401 (a classic session then raises Delta's conflicts with their condition)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import StorageSettings, is_remote
from outoforder.errors import SchemaError
from outoforder.io import deltalog
from outoforder.io.tables import ALL_TABLES, VOLATILE_COLUMNS, Table


def exists(spark: SparkSession, table: Table, lake_root: Path | str) -> bool:
    """Whether the Delta table has been created.

    A local lake's log is looked at directly; an object store's through Spark (the analysis of a
    read, no job), remembered once the table is there (a table is never dropped).
    """
    path = table.path(lake_root)
    if not is_remote(path):
        return deltalog.newest_version(path) is not None
    if path in _known:
        return True
    from pyspark.errors import AnalysisException

    try:
        spark.read.format("delta").load(path).schema  # noqa: B018 (the analysis is the question)
    except AnalysisException:
        return False
    _known.add(path)
    return True


_known: set[str] = set()


# Every table's properties at creation. A checkpoint costs a state reconstruction and a write
# (about six Spark jobs) on the commit that reaches it: every 100 commits rather than Delta's 10
# (a table a stage appends to every minute checkpoints every 100 minutes; reading it replays at most
# 100 small commits). Log entries older than two days go at a checkpoint, so a table's log (listed
# at every snapshot) stays a few days long however old the table; Delta requires the files removed
# from the table to be kept no longer than the log (VACUUM deletes them after that).
TABLE_PROPERTIES = {
    "delta.checkpointInterval": "100",
    "delta.logRetentionDuration": "interval 2 days",
    "delta.deletedFileRetentionDuration": "interval 2 days",
}


def ensure(spark: SparkSession, table: Table, lake_root: Path | str) -> None:
    """Create the table (empty, with its schema and :data:`TABLE_PROPERTIES`) if it does not exist yet."""
    if exists(spark, table, lake_root):
        return
    empty = spark.createDataFrame([], table.schema)
    writer = empty.write.format("delta").mode("append").options(**TABLE_PROPERTIES)
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(table.path(lake_root))


def read(spark: SparkSession, table: Table, lake_root: Path | str) -> DataFrame:
    """The whole table (lazily)."""
    return spark.read.format("delta").load(table.path(lake_root))


def conform(df: DataFrame, table: Table) -> DataFrame:
    """Select and cast ``df`` to the table's schema; fail clearly if a column is missing."""
    missing = [f.name for f in table.schema.fields if f.name not in df.columns]
    if missing:
        msg = f"cannot write {table.name}: missing columns {missing}"
        raise SchemaError(msg)
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in table.schema.fields])


def committed_version(
    table: Table, lake_root: Path | str, app_id: str, storage: StorageSettings | None = None
) -> int | None:
    """The newest transaction version committed to ``table`` under ``app_id`` (None: none yet).

    Read from the table's log (:mod:`outoforder.io.deltalog`); ``storage`` is needed for a lake on
    the object store.
    """
    return deltalog.committed_version(table.path(lake_root), app_id, storage)


def append_once(
    df: DataFrame,
    table: Table,
    lake_root: Path | str,
    app_id: str,
    version: int,
    storage: StorageSettings | None = None,
    options: Mapping[str, str] | None = None,
) -> bool:
    """Append ``df`` unless this (app_id, version) -- or a later version of app_id -- was committed.

    Returns whether it appended. The table's transaction ids are looked at first, so a rerun
    neither computes ``df`` nor writes; the write itself carries the id too (Delta's idempotent
    write), so of two attempts racing past the look, Delta commits one. ``storage``: the object
    store's settings, needed to look at a lake on it; ``options``: more options of Spark's writer.
    """
    done = committed_version(table, lake_root, app_id, storage)
    if done is not None and done >= version:
        return False
    writer = (
        conform(df, table)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", version)
        .option("mergeSchema", "true")  # tables written before a column was added gain it
        .options(**(options or {}))
    )
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(table.path(lake_root))
    return True


def append(
    df: DataFrame, table: Table, lake_root: Path | str, tag: str, options: Mapping[str, str] | None = None
) -> None:
    """Append ``df`` in one commit tagged ``tag`` (Delta's ``userMetadata``): one Spark job.

    No transaction id: Delta looks one up by reconstructing the table's state (three to six
    Spark jobs per write). A writer finds its own commits by the tag instead
    (:func:`outoforder.io.deltalog.tagged_commits`), which is how the stream stages keep a pass
    that was killed between its commits from writing twice. ``options``: the writer's (file sizes).
    """
    writer = (
        conform(df, table)
        .write.format("delta")
        .mode("append")
        .option("userMetadata", tag)
        .option("mergeSchema", "true")  # tables written before a column was added gain it
        .options(**(options or {}))
    )
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(table.path(lake_root))


def append_rows(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings,
    rows: Sequence[Sequence[Any]],
    app_id: str,
    version: int,
) -> bool:
    """Append a few driver-side rows (the table's column order) once, like :func:`append_once`."""
    if not rows:
        return False
    ensure(spark, table, lake_root)
    return append_once(
        spark.createDataFrame(list(rows), table.schema), table, lake_root, app_id, version, storage
    )


def replace_rows(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings,
    rows: Sequence[Sequence[Any]],
    match: dict[str, str | int],
    between: tuple[str, int, int] | None = None,
) -> None:
    """:func:`replace_where` for a few driver-side rows (the table's column order)."""
    del storage  # the slice is replaced by Delta's own write: nothing of the store is looked at here
    replace_where(spark.createDataFrame(list(rows), table.schema), table, lake_root, match, between)


def sql_literal(value: str | int) -> str:
    """A value as a SQL literal: integers as they are, strings quoted with ``'`` doubled.

    Every condition this project writes as SQL text (``replaceWhere``, MERGE and DELETE conditions)
    is built from these, so a source id such as ``o'hare/gate-1`` cannot end a string early.

    >>> sql_literal(7), sql_literal("o'hare")
    ('7', "'o''hare'")
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        msg = f"only integers and strings go into SQL conditions, got {value!r}"
        raise SchemaError(msg)
    return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"


def where_sql(match: Mapping[str, str | int], alias: str = "") -> str:
    """``col = literal AND …`` for the columns of ``match`` (prefixed ``alias.`` when given).

    >>> where_sql({"source": "a'b", "as_of_us": 5}, alias="t")
    "t.source = 'a''b' AND t.as_of_us = 5"
    """
    prefix = f"{alias}." if alias else ""
    return " AND ".join(f"{prefix}{col} = {sql_literal(v)}" for col, v in match.items())


def replace_where(
    df: DataFrame,
    table: Table,
    lake_root: Path | str,
    match: dict[str, str | int],
    between: tuple[str, int, int] | None = None,
) -> None:
    """Overwrite exactly the rows whose columns equal ``match`` (``replaceWhere``): idempotent.

    ``between = (col, lo, hi)`` narrows the slice to ``lo <= col < hi`` (an interval of a backfill).
    Rows of ``df`` outside the slice are dropped rather than written, so the write can never touch
    anything but the slice it replaces.
    """
    ensure(df.sparkSession, table, lake_root)
    cond = F.lit(True)
    for col, value in match.items():
        cond = cond & (F.col(col) == F.lit(value))
    clauses = [where_sql({c: v}) for c, v in match.items()]
    if between is not None:
        col, lo, hi = between
        cond = cond & (F.col(col) >= F.lit(lo)) & (F.col(col) < F.lit(hi))
        clauses.append(f"{col} >= {int(lo)} AND {col} < {int(hi)}")
    where = " AND ".join(clauses)
    writer = (
        conform(df.where(cond), table)
        .write.format("delta")
        .mode("overwrite")
        .option("replaceWhere", where)
        .option("mergeSchema", "true")  # tables written before a column was added gain it
    )
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(table.path(lake_root))


def replace_source(df: DataFrame, table: Table, lake_root: Path | str, source: str) -> None:
    """Overwrite exactly one source's rows (``replaceWhere``): re-running gives the same table."""
    replace_where(df, table, lake_root, {"source": source})


def merge_new(
    df: DataFrame,
    table: Table,
    lake_root: Path | str,
    keys: tuple[str, ...],
    prune: tuple[str, ...] = (),
) -> int:
    """Insert the rows of ``df`` whose ``keys`` are not in the table yet; return how many were new.

    Re-running with the same rows inserts nothing (the idempotent MERGE of results). ``keys``
    should start with the partition column, so Delta prunes files and concurrent MERGEs into
    other partitions do not conflict.

    ``prune`` names numeric key columns whose values cluster by write time (arrival ``seq``s): the
    condition then also bounds them on the target side to the range ``df`` spans. Such a bound
    cannot change which rows match (a match has the new row's value, which is inside the range),
    but Delta skips every file whose statistics fall outside it. Without it, each MERGE reads all
    the keys of the source's results: the long run's join slowed from about 24k to 15k tuples/s
    as its results table grew (docs/reliability.md, section 5). ``df`` is aggregated once for the
    range, so it should be cached or checkpointed.
    """
    spark = df.sparkSession
    ensure(spark, table, lake_root)
    clauses = [f"t.{k} = n.{k}" for k in keys]
    if prune:
        unknown = sorted(set(prune) - set(keys))
        if unknown:
            msg = f"cannot bound the MERGE into {table.name} on {unknown}: not among its keys {keys}"
            raise SchemaError(msg)
        span = df.agg(*(f(c) for c in prune for f in (F.min, F.max))).first()
        if span is not None and span[0] is not None:  # an empty df matches nothing: no bound needed
            clauses += [
                f"t.{c} BETWEEN {int(span[2 * i])} AND {int(span[2 * i + 1])}" for i, c in enumerate(prune)
            ]
    # the MERGE's own metrics, not the table's newest commit: that may be another writer's
    with _view(conform(df, table)) as new, _merge_broadcast_limit(spark):
        row = spark.sql(
            f"MERGE INTO {table_sql(table, lake_root)} AS t USING {new} AS n ON {' AND '.join(clauses)} "
            "WHEN NOT MATCHED THEN INSERT *"
        ).first()
    return 0 if row is None else int(row["num_inserted_rows"])


def delete_where(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    match: Mapping[str, str | int],
    below: tuple[str, int] | None = None,
    *,
    look_first: bool = True,
    only_look: bool = False,
) -> bool:
    """Delete the rows whose columns equal ``match`` (and, with ``below = (col, v)``, ``col < v``).

    A Delta DELETE scans and commits even when nothing matches, so the table is looked at first
    (one cheap read) unless ``look_first`` is off; ``only_look`` only looks. Returns whether
    anything matched (True when it did not look).
    """
    if not exists(spark, table, lake_root):
        return False
    cond = where_sql(match)
    if below is not None:
        cond += f" AND {below[0]} < {sql_literal(int(below[1]))}"
    if (look_first or only_look) and not read(spark, table, lake_root).where(cond).limit(1).count():
        return False
    if not only_look:
        spark.sql(f"DELETE FROM {table_sql(table, lake_root)} WHERE {cond}").collect()
    return True


def upsert(
    df: DataFrame,
    table: Table,
    lake_root: Path | str,
    keys: Sequence[str],
    match: Mapping[str, str | int],
    updates: Sequence[tuple[str, Sequence[str]]],
) -> None:
    """MERGE ``df`` into the slice ``match`` of the table on ``keys``: update, or insert what is new.

    ``updates`` are (condition, columns) in order: a matched row takes the new values of those
    columns under the first condition that holds (conditions refer to the table as ``t`` and the
    new rows as ``n``). Rows of ``df`` that match nothing are inserted whole. Extra columns of
    ``df`` (flags the conditions use) are allowed; the inserted row has the table's columns.
    """
    spark = df.sparkSession
    ensure(spark, table, lake_root)
    on = " AND ".join([where_sql(match, alias="t"), *(f"t.{k} = n.{k}" for k in keys)])
    clauses = [
        f"WHEN MATCHED AND ({condition}) THEN UPDATE SET {', '.join(f'{c} = n.{c}' for c in columns)}"
        for condition, columns in updates
    ]
    names = [f.name for f in table.schema.fields]
    clauses.append(
        f"WHEN NOT MATCHED THEN INSERT ({', '.join(names)}) VALUES ({', '.join(f'n.{c}' for c in names)})"
    )
    with _view(df) as new, _merge_broadcast_limit(spark):
        spark.sql(
            f"MERGE INTO {table_sql(table, lake_root)} AS t USING {new} AS n ON {on} {' '.join(clauses)}"
        ).collect()


def table_sql(table: Table, lake_root: Path | str) -> str:
    """The table as SQL names it (``delta.`<path>```), for MERGE, DELETE and maintenance statements.

    >>> from outoforder.io.tables import BRONZE
    >>> table_sql(BRONZE, "/tmp/a`b")
    'delta.`/tmp/a``b/bronze/arrivals`'
    """
    return "delta.`" + table.path(lake_root).replace("`", "``") + "`"


@contextmanager
def _view(df: DataFrame) -> Iterator[str]:
    """``df`` as a temporary view of a fresh name (the source of a SQL MERGE), dropped afterwards."""
    name = f"ooo_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    try:
        yield name
    finally:
        df.sparkSession.catalog.dropTempView(name)


_BROADCAST_KEYS = ("spark.sql.autoBroadcastJoinThreshold", "spark.sql.adaptive.autoBroadcastJoinThreshold")
# what a MERGE may still broadcast, in bytes of Parquet: small tables keep the fast broadcast, a
# table of millions of compressible rows (tens of MB as a hash table per MB of Parquet) does not
MERGE_BROADCAST_MAX = str(1 << 20)


_broadcast_lock = threading.Lock()
_broadcast_limited: dict[str, Any] = {"depth": 0, "before": {}}


@contextmanager
def _merge_broadcast_limit(spark: SparkSession) -> Iterator[None]:
    """Broadcast joins only of tables under 1 MB inside the block (the settings are restored after it).

    Spark sizes a Delta table by its Parquet files. A results table of millions of highly
    compressible rows then looks small enough to broadcast, and the MERGE builds it as a hash table
    in the driver's heap: the long run's join results failed that way at about 3.5 million input
    tuples (docs/reliability.md, section 5). Threads sharing the session (MERGEs into two tables at
    once) nest: the first one in saves the settings, the last one out restores them.
    """
    with _broadcast_lock:
        if _broadcast_limited["depth"] == 0:
            _broadcast_limited["before"] = {k: spark.conf.get(k, None) for k in _BROADCAST_KEYS}
            for k in _BROADCAST_KEYS:
                spark.conf.set(k, MERGE_BROADCAST_MAX)
        _broadcast_limited["depth"] += 1
    try:
        yield
    finally:
        with _broadcast_lock:
            _broadcast_limited["depth"] -= 1
            if _broadcast_limited["depth"] == 0:
                for k, v in _broadcast_limited["before"].items():
                    if v is None:
                        spark.conf.unset(k)
                    else:
                        spark.conf.set(k, v)


def read_arrivals(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    *,
    source: str | None = None,
    seq_range: tuple[int, int] | None = None,
    arrival_ts_range: tuple[int, int] | None = None,
) -> DataFrame:
    """Bronze rows of one source in a half-open arrival interval ``[start, end)``.

    By ``arrival_seq`` or by ``arrival_ts`` (µs); ``source`` prunes partitions.
    """
    df = read(spark, table, lake_root)
    if source is not None:
        df = df.where(F.col("source") == source)
    if seq_range is not None:
        df = df.where((F.col("arrival_seq") >= seq_range[0]) & (F.col("arrival_seq") < seq_range[1]))
    if arrival_ts_range is not None:
        lo, hi = arrival_ts_range
        df = df.where((F.col("arrival_ts") >= lo) & (F.col("arrival_ts") < hi))
    return df


def content_digest(spark: SparkSession, table: Table, lake_root: Path | str) -> dict[str, object]:
    """Rows and an order-independent digest of a table's content (``{"rows": 0}`` if it is absent).

    The digest is the sum of a 64-bit hash of every row, over the columns that are not
    :data:`~outoforder.io.tables.VOLATILE_COLUMNS`, with doubles printed to 8 significant digits
    and magnitudes below 1e-9 taken as 0. Why: a sum's last bits depend on how its rows were
    partitioned, and a quantity derived from two such sums (a relative error of 1e-4 between an
    emitted and an exact window value) carries noise of about 1e-12 of its size that changes with
    the partition count (measured between local[2] with 2 and a cluster with 4 shuffle
    partitions). Equal digests mean equal multisets of rows, up to hash collisions and to values
    that straddle an 8-digit rounding boundary (about 1e-4 of such noisy values).
    """
    if not exists(spark, table, lake_root):
        return {"rows": 0, "digest": "0"}
    kept = [f for f in table.schema.fields if f.name not in VOLATILE_COLUMNS]
    cols = []
    for f in kept:
        c = F.col(f.name)
        if f.dataType.typeName() in ("double", "float"):
            c = F.format_string("%.8g", F.when(F.abs(c) < F.lit(1e-9), F.lit(0.0)).otherwise(c))
        cols.append(F.coalesce(c.cast("string"), F.lit("\u2205")).alias(f.name))
    row_hash = F.xxhash64(*cols).cast("decimal(38,0)")
    agg = read(spark, table, lake_root).select(row_hash.alias("h")).agg(F.count("*"), F.sum("h")).first()
    rows, total = (0, None) if agg is None else (int(agg[0]), agg[1])
    return {"rows": rows, "digest": str(total if total is not None else 0)}


def content_digests(
    spark: SparkSession, lake_root: Path | str, tables: Iterable[Table] = ALL_TABLES
) -> dict[str, dict[str, object]]:
    """:func:`content_digest` of each table, by table name (compare two lakes, or a lake over time)."""
    return {t.name: content_digest(spark, t, lake_root) for t in tables}


def maintain(
    spark: SparkSession, table: Table, lake_root: Path | str, optimize: bool = True
) -> dict[str, int]:
    """Compact the table's small files (OPTIMIZE), then VACUUM the files no recent snapshot uses.

    VACUUM keeps every file that a snapshot of the table's ``delta.deletedFileRetentionDuration``
    (2 days for the tables created here, :data:`TABLE_PROPERTIES`; Delta 4 ignores a retention passed
    to VACUUM) refers
    to, so a reader that opened an older snapshot (a stage still running, a report) finds its
    files; the project's repairs read current snapshots, never by time travel. Both operations
    commit like any writer: a conflict with a stage's concurrent write is detected by Delta and
    one side retries (see :mod:`outoforder.io.conflicts`). Returns the file counts before and
    after compaction and how many unreferenced files VACUUM deleted.
    """
    if not exists(spark, table, lake_root):
        return {"files_before": 0, "files_after": 0, "vacuumed": 0}
    name = table_sql(table, lake_root)

    def files() -> int:
        row = spark.sql(f"DESCRIBE DETAIL {name}").select("numFiles").first()
        return 0 if row is None else int(row[0])

    before = files()
    if optimize:
        spark.sql(f"OPTIMIZE {name}").collect()
    after = files()
    doomed = spark.sql(f"VACUUM {name} DRY RUN").count()
    spark.sql(f"VACUUM {name}").collect()
    return {"files_before": before, "files_after": after, "vacuumed": int(doomed)}
