"""Small Delta tables read on the driver without a Spark job: a job's position, coverage, bookkeeping.

A stream stage run asks a few small questions before its pass (where the job stands, how far the
ingest has covered the source); through Spark each is a Delta snapshot's state reconstruction
and a scan (two to four Spark jobs, planned and compiled on the shared server's driver), which is
most of a minute's work when the data is small. delta-rs reads the same tables from their log and
Parquet files in the stage's own process, with partition pruning and file statistics. Only reads:
every write stays Spark's, through the one application that owns the lake (Delta's single-driver
log store on object storage).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import StorageSettings, is_remote
from outoforder.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

    from outoforder.io.tables import Table

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
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",  # read only: no log writes go through delta-rs
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
