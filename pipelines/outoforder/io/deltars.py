"""Small Delta tables read and written on the driver without a Spark job: positions, bookkeeping, checks.

A stream stage run asks a few small questions before its pass (where the job stands, how far the
ingest has covered the source), and a check stores a few rows per period or window it judged;
through Spark each is a Delta snapshot's state reconstruction and a scan or a write (two to eight
Spark jobs, planned and compiled on the shared server's driver), which is most of a minute's work
when the data is small. delta-rs reads and appends the same tables from their log and Parquet
files in the stage's own process, with partition pruning and file statistics. Writes here are
only for rows the driver already holds (a check's verdicts and measures); everything computed by
Spark is written by Spark. Both writers commit the same way, by creating the next log file only
if it does not exist (on an object store with a conditional PUT: docs/deploy.md), so they can
share a table.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import StorageSettings, is_remote
from outoforder.errors import ConfigError, WriteConflict

if TYPE_CHECKING:
    import pyarrow as pa

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)
Filter = tuple[str, str, Any]  # (column, "=" | "<" | "<=" | ">" | ">=" | "in", value)


def storage_options(path: str, storage: StorageSettings | None) -> dict[str, str]:
    """delta-rs's options for the object store under an ``s3a://`` path (none for a local one)."""
    if not is_remote(path):
        return {}
    if storage is None:
        msg = f"reading {path} needs the object store's settings"
        raise ConfigError(msg)
    storage.require_credentials()
    return {
        "AWS_ENDPOINT_URL": storage.endpoint,
        "AWS_ACCESS_KEY_ID": storage.access_key,
        "AWS_SECRET_ACCESS_KEY": storage.secret_key,
        "AWS_REGION": storage.region,
        "AWS_ALLOW_HTTP": str(storage.endpoint.startswith("http://")).lower(),
        "AWS_CONDITIONAL_PUT": "etag",  # commits create the next log file with If-None-Match, as Spark's
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not storage.path_style).lower(),
    }


def _uri(path: str) -> str:
    return "s3://" + path[len("s3a://") :] if path.startswith("s3a://") else path


def read_table(
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings | None,
    filters: Sequence[Filter] = (),
    columns: Sequence[str] | None = None,
) -> pa.Table | None:
    """The rows of ``table`` matching ``filters`` (None when the table does not exist yet).

    Filters on partition columns prune directories, the others skip files by their statistics;
    all are then applied to the rows.
    """
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    path = table.path(lake_root)
    try:
        dt = DeltaTable(_uri(path), storage_options=storage_options(path, storage))
    except TableNotFoundError:
        return None
    # the filters select files (partition values, and the min/max statistics of the others), then rows
    data = dt.to_pyarrow_dataset(file_pruning_predicate=[(c, op, v) for c, op, v in filters] or None)
    expr = None
    for col, op, value in filters:
        field = pc.field(col)
        term = {
            "=": lambda f, v: f == v,
            "<": lambda f, v: f < v,
            "<=": lambda f, v: f <= v,
            ">": lambda f, v: f > v,
            ">=": lambda f, v: f >= v,
            "in": lambda f, v: f.isin(list(v)),
        }[op](field, value)
        expr = term if expr is None else expr & term
    return data.to_table(filter=expr, columns=list(columns) if columns is not None else None)


def file_ranges(
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings | None,
    partition: tuple[str, str],
    column: str,
) -> list[tuple[int, int, int]]:
    """Per live file of one partition: ``column``'s least and greatest value and the file's rows.

    Read from the log's statistics (no data file is opened); files without statistics are left
    out, and so is everything when the table does not exist yet or when delta-rs cannot read its
    log (a table feature it does not know, e.g. collated strings written by Spark: a warning says
    so, and the caller sees no files).
    """
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    path = table.path(lake_root)
    try:
        dt = DeltaTable(_uri(path), storage_options=storage_options(path, storage))
        actions = pa.table(dt.get_add_actions(flatten=True))
    except TableNotFoundError:
        return []
    except DeltaError as e:
        log.warning("%s: its log's file statistics cannot be read without Spark (%s)", table.name, e)
        return []
    key, lo, hi = f"partition.{partition[0]}", f"min.{column}", f"max.{column}"
    if not {key, lo, hi} <= set(actions.column_names):
        return []
    return [
        (int(a), int(b), int(n))
        for p, a, b, n in zip(
            *(actions.column(c).to_pylist() for c in (key, lo, hi, "num_records")), strict=True
        )
        if p == partition[1] and a is not None and b is not None and n is not None
    ]


def _arrow(table: Table, rows: Sequence[Sequence[Any]]) -> pa.Table:
    """Driver rows (the table's column order) as Arrow, with the table's types and nullability."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    fields = table.schema.fields
    schema = pa.schema([pa.field(f.name, to_arrow_type(f.dataType), f.nullable) for f in fields])
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    return pa.table(
        [pa.array(list(c), type=schema.field(i).type) for i, c in enumerate(columns)], schema=schema
    )


def replace_rows(
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings | None,
    rows: Sequence[Sequence[Any]],
    match: dict[str, str | int],
    between: tuple[str, int, int] | None = None,
) -> None:
    """Overwrite exactly the rows whose columns equal ``match`` with ``rows``, in one commit: idempotent.

    ``between = (col, lo, hi)`` narrows the slice to ``lo <= col < hi``. The driver-side twin of
    :func:`outoforder.io.delta.replace_rows` (no Spark job); creates the table when it is new.
    """
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    from outoforder.io.delta import TABLE_PROPERTIES, sql_literal, where_sql

    cond = where_sql(match)
    names = table.schema.fieldNames()
    keep = [(names.index(c), v) for c, v in match.items()]
    if between is not None:
        col, lo, hi = between
        cond += f" AND {col} >= {sql_literal(lo)} AND {col} < {sql_literal(hi)}"
        at = names.index(col)
    # rows outside the slice are dropped rather than written: the write touches nothing else
    rows = [
        r for r in rows
        if all(r[i] == v for i, v in keep) and (between is None or between[1] <= r[at] < between[2])
    ]  # fmt: skip
    path = table.path(lake_root)
    try:
        write_deltalake(
            _uri(path), _arrow(table, rows), mode="overwrite", predicate=cond,
            partition_by=list(table.partition_by) or None, configuration=dict(TABLE_PROPERTIES),
            storage_options=storage_options(path, storage),
        )  # fmt: skip
    except CommitFailedError as e:  # a concurrent commit touched the slice: redo from a fresh read
        msg = f"{table.name}: a concurrent commit won ({e})"
        raise WriteConflict(msg) from e


def merge_new(
    table: Table,
    lake_root: Path | str,
    storage: StorageSettings | None,
    rows: Sequence[Sequence[Any]],
    keys: Sequence[str],
) -> int:
    """Insert the ``rows`` whose ``keys`` are not in the table yet, in one commit; how many were new.

    The driver-side twin of :func:`outoforder.io.delta.merge_new` for rows the driver holds (no
    Spark job): re-running inserts nothing and commits nothing. The table must exist. It is an
    overwrite of the new keys' (empty) slice from the snapshot their absence was read in, not
    delta-rs's MERGE, which writes strings as Arrow's view type that pyarrow's scans cannot compare
    with a string literal. A concurrent commit adding rows with these keys makes it lose:
    :class:`~outoforder.errors.WriteConflict`, redone from a fresh read.
    """
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError, TableNotFoundError

    from outoforder.io.delta import where_sql

    path = table.path(lake_root)
    options = storage_options(path, storage)
    try:
        dt = DeltaTable(_uri(path), storage_options=options)
    except TableNotFoundError as e:
        msg = f"{table.name} does not exist at {path}: it is created before rows are merged into it"
        raise ConfigError(msg) from e
    at = [table.schema.fieldNames().index(k) for k in keys]
    wanted: dict[tuple[Any, ...], Sequence[Any]] = {}
    for r in rows:
        wanted.setdefault(tuple(r[i] for i in at), r)
    if not wanted:
        return 0
    # the keys present among any of the wanted values (pruned by the log's statistics)
    near = None
    for i, k in enumerate(keys):
        term = pc.field(k).isin(sorted({key[i] for key in wanted}))
        near = term if near is None else near & term
    present = dt.to_pyarrow_dataset().to_table(filter=near, columns=list(keys)).to_pylist()
    have = {tuple(r[k] for k in keys) for r in present}
    new = {key: r for key, r in wanted.items() if key not in have}
    if not new:
        return 0
    cond = " OR ".join(f"({where_sql(dict(zip(keys, key, strict=True)))})" for key in new)
    try:  # from the snapshot read above: a commit since then adding these keys conflicts
        write_deltalake(
            dt, _arrow(table, list(new.values())), mode="overwrite", predicate=cond,
            partition_by=list(table.partition_by) or None, storage_options=options,
        )  # fmt: skip
    except CommitFailedError as e:
        msg = f"{table.name}: a concurrent commit won ({e})"
        raise WriteConflict(msg) from e
    return len(new)
