"""Reading and writing Delta tables: the only module that touches storage.

Writes are idempotent through Delta's transaction identifiers (``txnAppId`` / ``txnVersion``): a
write tagged with an (app id, version) that the table has already committed is skipped by Delta
itself, so re-running a batch after a crash or a retry changes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import StorageSettings
from outoforder.errors import SchemaError, WriteConflict
from outoforder.io.tables import ALL_TABLES, VOLATILE_COLUMNS, Table


def exists(spark: SparkSession, table: Table, lake_root: Path | str) -> bool:
    """Whether the Delta table has been created."""
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, table.path(lake_root)))


def ensure(spark: SparkSession, table: Table, lake_root: Path | str) -> None:
    """Create the table (empty, with its schema) if it does not exist yet."""
    if exists(spark, table, lake_root):
        return
    empty = spark.createDataFrame([], table.schema)
    writer = empty.write.format("delta").mode("append")
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


def append_once(df: DataFrame, table: Table, lake_root: Path | str, app_id: str, version: int) -> bool:
    """Append ``df`` unless this (app_id, version) -- or a later version of app_id -- was committed.

    Returns whether it appended. The table's transaction ids are looked at first, so a rerun
    neither computes ``df`` nor writes; the write itself carries the id too, so of two attempts
    racing past the look, Delta commits one.
    """
    done = committed_version(df.sparkSession, table, lake_root, app_id)
    if done is not None and done >= version:
        return False
    writer = (
        conform(df, table)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", version)
        .option("mergeSchema", "true")  # tables written before a column was added gain it
    )
    if table.partition_by:
        writer = writer.partitionBy(*table.partition_by)
    writer.save(table.path(lake_root))
    return True


def _kernel(spark: SparkSession) -> tuple[Any, Any, Any]:
    """The JVM, Delta Kernel's classes and an engine on the session's Hadoop configuration (s3a included)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        msg = "committing files needs a classic Spark session with a JVM (not Spark Connect)"
        raise SchemaError(msg)
    engine = _engines.get(id(spark.sparkContext))
    if engine is None:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        engine = jvm.io.delta.kernel.defaults.engine.DefaultEngine.create(conf)
        _engines[id(spark.sparkContext)] = engine
    return jvm, jvm.io.delta.kernel, engine


_engines: dict[int, Any] = {}


def _snapshot(spark: SparkSession, table: Table, lake_root: Path | str) -> Any:
    _, kernel, engine = _kernel(spark)
    return kernel.TableManager.loadSnapshot(table.path(lake_root)).build(engine)


def _transaction(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    app: tuple[str, int] | None,
    snapshot: Any = None,
    retries: int | None = None,
) -> Any:
    """A Kernel write transaction on ``snapshot`` (default: the newest).

    ``retries`` 0 commits only right after that snapshot: a concurrent commit raises instead of
    being rebased over (what a write that looked at the snapshot first needs).
    """
    _, kernel, engine = _kernel(spark)
    snapshot = snapshot if snapshot is not None else _snapshot(spark, table, lake_root)
    builder = snapshot.buildUpdateTableTransaction("outoforder", kernel.Operation.WRITE)
    if app is not None:
        builder = builder.withTransactionId(app[0], app[1])
    if retries is not None:
        builder = builder.withMaxRetries(retries)
    return builder.build(engine)


def _partition(spark: SparkSession, table: Table, partition: Mapping[str, str]) -> Any:
    if sorted(partition) != sorted(table.partition_by):
        msg = f"{table.name} is partitioned by {table.partition_by}, got values for {sorted(partition)}"
        raise SchemaError(msg)
    jvm, kernel, _ = _kernel(spark)
    values = jvm.java.util.HashMap()
    for col, value in partition.items():
        values.put(col, kernel.expressions.Literal.ofString(value))
    return values


def table_folder(
    spark: SparkSession, table: Table, lake_root: Path | str, partition: Mapping[str, str]
) -> str:
    """Where the files of one partition of ``table`` go (Delta's own path escaping), as a path or URI."""
    ensure(spark, table, lake_root)
    return _folder(spark, table, _transaction(spark, table, lake_root, None), partition)


def _folder(spark: SparkSession, table: Table, txn: Any, partition: Mapping[str, str]) -> str:
    jvm, kernel, engine = _kernel(spark)
    state = txn.getTransactionState(engine)
    target = kernel.Transaction.getWriteContext(engine, state, _partition(spark, table, partition))
    return str(jvm.org.apache.hadoop.fs.Path(target.getTargetDirectory()).toString())


def stats_columns(table: Table) -> list[str]:
    """The columns Delta keeps file statistics of: the first 32 that are not partition columns."""
    return [f.name for f in table.schema.fields if f.name not in table.partition_by][:32]


def committed_version(spark: SparkSession, table: Table, lake_root: Path | str, app_id: str) -> int | None:
    """The newest transaction version committed to ``table`` under ``app_id`` (None: none yet)."""
    _, kernel, engine = _kernel(spark)
    if not exists(spark, table, lake_root):
        return None
    snapshot = kernel.TableManager.loadSnapshot(table.path(lake_root)).build(engine)
    found = snapshot.getLatestTransactionVersion(engine, app_id)
    return int(found.get()) if found.isPresent() else None


def commit_files(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    partition: Mapping[str, str],
    files: Sequence[Any],
    app_id: str,
    version: int,
) -> bool:
    """Commit Parquet files written by tasks (:class:`outoforder.io.files.WrittenFile`) as one append.

    Idempotent like :func:`append_once`: nothing is committed when ``(app_id, version)`` (or a later
    version of ``app_id``) is in the table already, and False is returned. Delta Kernel writes the
    commit (with the transaction id) and, every tenth version, the checkpoint that keeps reads fast.
    A concurrent writer's commit is retried by Kernel; one that changed the table's schema raises
    :class:`~outoforder.errors.WriteConflict`, which the caller's conflict retry redoes
    (:mod:`outoforder.io.conflicts`).
    """
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

    ensure(spark, table, lake_root)
    done = committed_version(spark, table, lake_root, app_id)
    if done is not None and done >= version:
        return False
    try:
        txn = _transaction(spark, table, lake_root, (app_id, version))
    except Py4JJavaError as e:
        if "ConcurrentTransactionException" in str(e.java_exception.getClass().getName()):
            return False  # another attempt committed this transaction id since the check above
        raise
    return _commit(spark, table, txn, partition, files, f"this append ({app_id}, {version})")


def _commit(
    spark: SparkSession, table: Table, txn: Any, partition: Mapping[str, str], files: Sequence[Any], what: str
) -> bool:
    """Commit ``files`` (of one partition) in ``txn``; False if its transaction id was committed meanwhile."""
    from py4j.protocol import Py4JJavaError

    jvm, kernel, engine = _kernel(spark)
    state = txn.getTransactionState(engine)
    context = kernel.Transaction.getWriteContext(engine, state, _partition(spark, table, partition))
    schema = txn.getSchema(engine)
    statuses = jvm.java.util.ArrayList()
    for f in files:
        stats = kernel.statistics.DataFileStatistics.deserializeFromJson(f.stats, schema)
        statuses.add(kernel.utils.DataFileStatus(f.uri, f.size, f.modified_ms, stats))
    actions = kernel.Transaction.generateAppendActions(
        engine, state, kernel.internal.util.Utils.toCloseableIterator(statuses.iterator()), context
    )
    try:
        result = txn.commit(engine, kernel.utils.CloseableIterable.inMemoryIterable(actions))
    except Py4JJavaError as e:
        name = str(e.java_exception.getClass().getName())
        if name.endswith("ConcurrentTransactionException"):
            return False
        if name.endswith(("ConcurrentWriteException", "MaxCommitRetryLimitReachedException")):
            msg = f"a concurrent commit to {table.name} conflicts with {what}"
            raise WriteConflict(msg) from e
        raise
    for hook in result.getPostCommitHooks():
        hook.threadSafeInvoke(engine)
    return True


# --- a few rows from the driver ----------------------------------------------------------------
#
# A state row, a check's verdicts, the measures of the periods it judged: a handful of rows that
# the driver holds anyway. Spark's writer spends about a second on each such commit (planning, a
# job, a replaceWhere's scan for the rows it replaces); one Parquet file written here and a Kernel
# commit take about a tenth of that, and an interval writes several (docs/benchmarks/scale.md).


_STATS_TYPES = frozenset({"long", "integer", "double", "string", "boolean"})


def _rows_file(
    spark: SparkSession, table: Table, txn: Any, storage: StorageSettings, rows: Sequence[Sequence[Any]]
) -> tuple[dict[str, str], Any]:
    """``rows`` (the table's column order, one partition) as one Parquet file in their partition's folder."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from outoforder.io.files import write_parquet

    names = table.schema.fieldNames()
    records = [dict(zip(names, r, strict=True)) for r in rows]
    partitions = {tuple(str(r[c]) for c in table.partition_by) for r in records}
    if len(partitions) != 1:
        msg = (
            f"rows for {table.name} must lie in one partition of {table.partition_by}, got {len(partitions)}"
        )
        raise SchemaError(msg)
    partition = dict(zip(table.partition_by, partitions.pop(), strict=True))
    data = pa.Table.from_pylist(records, schema=to_arrow_schema(table.schema)).drop_columns(
        list(table.partition_by)
    )
    flat = {f.name for f in table.schema.fields if f.dataType.typeName() in _STATS_TYPES}
    stats = [c for c in stats_columns(table) if c in flat]
    folder = _folder(spark, table, txn, partition)
    return partition, write_parquet(data, folder, "part-driver", storage, stats)


def _same_schema(table: Table, snapshot: Any) -> bool:
    """Whether the table on disk has exactly the declared columns (else Spark's writer merges them)."""
    return list(snapshot.getSchema().fieldNames()) == table.schema.fieldNames()


def append_rows(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings,
    rows: Sequence[Sequence[Any]],
    app_id: str,
    version: int,
) -> bool:
    """Append a few driver-side rows (table column order, one partition) once, like :func:`append_once`.

    Written as one Parquet file and committed by Delta Kernel with the transaction id; a table
    whose columns differ from the declared ones (written before a column was added) goes through
    Spark's writer instead, which merges the schema.
    """
    ensure(spark, table, lake_root)
    if not rows:
        return False
    snapshot = _snapshot(spark, table, lake_root)
    if not _same_schema(table, snapshot):
        return append_once(spark.createDataFrame(list(rows), table.schema), table, lake_root, app_id, version)
    _, _, engine = _kernel(spark)
    done = snapshot.getLatestTransactionVersion(engine, app_id)
    if done.isPresent() and int(done.get()) >= version:
        return False
    txn = _transaction(spark, table, lake_root, (app_id, version), snapshot=snapshot)
    partition, written = _rows_file(spark, table, txn, storage, rows)
    return _commit(spark, table, txn, partition, [written], f"this append ({app_id}, {version})")


def _slice_predicate(
    spark: SparkSession, match: Mapping[str, str | int], between: tuple[str, int, int] | None
) -> Any:
    _, kernel, _ = _kernel(spark)
    ex = kernel.expressions

    def lit(v: str | int) -> Any:
        return ex.Literal.ofString(v) if isinstance(v, str) else ex.Literal.ofLong(v)

    def cmp(op: str, col: str, v: str | int) -> Any:
        return ex.Predicate(op, ex.Column(col), lit(v))

    parts = [cmp("=", c, v) for c, v in match.items()]
    if between is not None:
        col, lo, hi = between
        parts += [cmp(">=", col, lo), cmp("<", col, hi)]
    pred = parts[0]
    for p in parts[1:]:
        pred = ex.And(pred, p)
    return pred


def _may_hold(spark: SparkSession, snapshot: Any, predicate: Any) -> bool:
    """Whether any file of ``snapshot`` may hold a row matching ``predicate`` (partitions and statistics)."""
    _, _, engine = _kernel(spark)
    files = snapshot.getScanBuilder().withFilter(predicate).build().getScanFiles(engine)
    try:
        while files.hasNext():
            batch = files.next()
            selected = batch.getRows()
            try:
                if selected.hasNext():
                    return True
            finally:
                selected.close()
        return False
    finally:
        files.close()


_LOOKS = 5  # commits that may land between a look and the append before the caller's retry takes over


def replace_rows(
    spark: SparkSession,
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings,
    rows: Sequence[Sequence[Any]],
    match: dict[str, str | int],
    between: tuple[str, int, int] | None = None,
) -> None:
    """:func:`replace_where` for a few driver-side rows (table column order, one partition).

    When no file of the table can hold a row of the slice (by partition and file statistics: the
    usual case, a check judging periods for the first time), the rows are appended by Delta Kernel
    in a commit that must directly follow the snapshot that was looked at. When another commit
    lands in between (another check's verdicts in ``gold/quality_runs``), the look is repeated on
    the new snapshot, as Delta's own conflict check would: only a commit that may have added rows
    to the slice sends the write to ``replaceWhere``. Otherwise, or when the table's columns differ
    from the declared ones, Spark's ``replaceWhere`` replaces the slice.
    """
    ensure(spark, table, lake_root)
    names = table.schema.fieldNames()

    def inside(r: Sequence[Any]) -> bool:
        d = dict(zip(names, r, strict=True))
        ok = all(d[c] == v for c, v in match.items())
        return ok and (between is None or between[1] <= d[between[0]] < between[2])

    kept = [r for r in rows if inside(r)]  # as replace_where: nothing outside the slice is written
    predicate = _slice_predicate(spark, match, between)
    written = None
    for attempt in range(_LOOKS):
        snapshot = _snapshot(spark, table, lake_root)
        if not _same_schema(table, snapshot) or _may_hold(spark, snapshot, predicate):
            replace_where(spark.createDataFrame(kept, table.schema), table, lake_root, match, between)
            return
        if not kept:
            return
        txn = _transaction(spark, table, lake_root, None, snapshot=snapshot, retries=0)
        written = written or _rows_file(
            spark, table, txn, storage, kept
        )  # written once, committed by any try
        try:
            _commit(spark, table, txn, written[0], [written[1]], f"replacing {where_sql(match)}")
            return
        except WriteConflict:
            if attempt == _LOOKS - 1:
                raise


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
    from delta.tables import DeltaTable

    spark = df.sparkSession
    ensure(spark, table, lake_root)
    target = DeltaTable.forPath(spark, table.path(lake_root))
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
    merge = (
        target.alias("t")
        .merge(conform(df, table).alias("n"), " AND ".join(clauses))
        .whenNotMatchedInsertAll()
    )
    with _merge_broadcast_limit(spark):
        row = merge.execute().first()
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
    from delta.tables import DeltaTable

    if not exists(spark, table, lake_root):
        return False
    cond = where_sql(match)
    if below is not None:
        cond += f" AND {below[0]} < {sql_literal(int(below[1]))}"
    if (look_first or only_look) and not read(spark, table, lake_root).where(cond).limit(1).count():
        return False
    if not only_look:
        DeltaTable.forPath(spark, table.path(lake_root)).delete(cond)
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
    from delta.tables import DeltaTable

    spark = df.sparkSession
    ensure(spark, table, lake_root)
    on = " AND ".join([where_sql(match, alias="t"), *(f"t.{k} = n.{k}" for k in keys)])
    merge = DeltaTable.forPath(spark, table.path(lake_root)).alias("t").merge(df.alias("n"), on)
    for condition, columns in updates:
        merge = merge.whenMatchedUpdate(condition=condition, set={c: f"n.{c}" for c in columns})
    merge = merge.whenNotMatchedInsert(values={f.name: f"n.{f.name}" for f in table.schema.fields})
    with _merge_broadcast_limit(spark):
        merge.execute()


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
    (7 days unless the table says otherwise; Delta 4 ignores a retention passed to VACUUM) refers
    to, so a reader that opened an older snapshot (a stage still running, a report) finds its
    files; the project's repairs read current snapshots, never by time travel. Both operations
    commit like any writer: a conflict with a stage's concurrent write is detected by Delta and
    one side retries (see :mod:`outoforder.io.conflicts`). Returns the file counts before and
    after compaction and how many unreferenced files VACUUM deleted.
    """
    from delta.tables import DeltaTable

    if not exists(spark, table, lake_root):
        return {"files_before": 0, "files_after": 0, "vacuumed": 0}
    path = table.path(lake_root)
    target = DeltaTable.forPath(spark, path)

    def files() -> int:
        row = target.detail().select("numFiles").first()
        return 0 if row is None else int(row[0])

    before = files()
    if optimize:
        target.optimize().executeCompaction()
    after = files()
    quoted = path.replace("`", "``")
    doomed = spark.sql(f"VACUUM delta.`{quoted}` DRY RUN").count()
    target.vacuum()
    return {"files_before": before, "files_after": after, "vacuumed": int(doomed)}
