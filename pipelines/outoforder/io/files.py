"""Files that Spark tasks read and write themselves: raw input files, and Parquet files of Delta tables.

Ingest parses raw files inside Spark tasks and writes bronze's Parquet files from there with
pyarrow (about twenty times faster than handing the rows to Spark's row writer); the driver then
commits the files to the Delta table in one transaction (:func:`outoforder.io.delta.commit_files`).
Until that commit the files are invisible to every reader, so a task that dies, or a write whose
transaction id was committed already, leaves only unreferenced files that VACUUM removes.

Paths are local paths, ``file:`` URIs or ``s3a://bucket/key`` URIs (the lake and landing zone on
MinIO); the object store is reached with pyarrow's S3 client and the project's storage settings.
Nothing here imports Spark: this code runs in the executors' Python workers.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from outoforder.config import StorageSettings
from outoforder.errors import ConfigError, InputError

# row groups are what Spark splits a file at: a one-minute bronze file of 650k rows in 1M-row
# groups was read (and everything narrow after it run) by one task
ROW_GROUP_ROWS = 1 << 17


def filesystem(uri: str, storage: StorageSettings) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``uri`` and the path on it (``bucket/key`` on the object store).

    >>> fs, path = filesystem("file:/tmp/lake/t", StorageSettings())
    >>> type(fs).__name__, path
    ('LocalFileSystem', '/tmp/lake/t')
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        endpoint = urlparse(storage.endpoint)
        if not endpoint.hostname:
            msg = f"storage.endpoint must be http(s)://host:port, got {storage.endpoint!r}"
            raise ConfigError(msg)
        storage.require_credentials()
        fs = pafs.S3FileSystem(
            access_key=storage.access_key,
            secret_key=storage.secret_key,
            region=storage.region,
            endpoint_override=endpoint.netloc,
            scheme=endpoint.scheme or "http",
            force_virtual_addressing=not storage.path_style,
        )
        return fs, f"{parsed.netloc}/{parsed.path.lstrip('/')}"
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parsed.path if parsed.scheme else uri
    msg = f"cannot read or write {uri!r}: only local paths, file: and s3a:// URIs are supported"
    raise ConfigError(msg)


def open_input(uri: str, storage: StorageSettings) -> IO[bytes]:
    """A raw input file, seekable, for reading (the error names the file)."""
    fs, path = filesystem(uri, storage)
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            return Path(path).open("rb", buffering=1 << 20)
        return fs.open_input_file(path)  # type: ignore[no-any-return]
    except (OSError, pa.ArrowException) as e:
        msg = f"cannot open {uri}: {e}"
        raise InputError(msg) from e


def file_size(uri: str, storage: StorageSettings) -> int:
    """The size of an input file in bytes (the error names the file)."""
    fs, path = filesystem(uri, storage)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        msg = f"no such file: {uri}"
        raise InputError(msg)
    return int(info.size)


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file a task wrote into a table's folder, with what the Delta commit needs."""

    uri: str  # where it is (the table folder's URI + the file name)
    size: int
    modified_ms: int
    rows: int
    stats: str  # Delta's per-file statistics (JSON): numRecords, minValues, maxValues, nullCount


def _bound(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def delta_stats(table: pa.Table, columns: list[str]) -> str:
    """Delta's statistics of ``table`` for ``columns``: min and max (numbers and strings), null counts.

    >>> import json
    >>> json.loads(delta_stats(pa.table({"a": [3, 1, None], "s": ["x", "y", None]}), ["a", "s"]))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'numRecords': 3, 'minValues': {'a': 1, 's': 'x'}, 'maxValues': {'a': 3, 's': 'y'},
     'nullCount': {'a': 1, 's': 1}}
    """
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns:
        col = table.column(name)
        nulls[name] = col.null_count
        if not (
            pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_string(col.type)
        ):
            continue
        if col.null_count == len(col):
            continue
        bounds = pc.min_max(col)
        lo, hi = _bound(bounds["min"].as_py()), _bound(bounds["max"].as_py())
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    return json.dumps(
        {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


def write_parquet(
    table: pa.Table, folder_uri: str, prefix: str, storage: StorageSettings, stats_columns: list[str]
) -> WrittenFile:
    """Write ``table`` as one Parquet file (a fresh name under ``folder_uri``) and describe it."""
    fs, folder = filesystem(folder_uri, storage)
    name = f"{prefix}-{uuid.uuid4().hex}.snappy.parquet"
    path = f"{folder.rstrip('/')}/{name}"
    fs.create_dir(folder, recursive=True)
    pq.write_table(table, path, filesystem=fs, compression="snappy", row_group_size=ROW_GROUP_ROWS)
    info = fs.get_file_info(path)
    modified = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
    return WrittenFile(
        f"{folder_uri.rstrip('/')}/{name}",
        int(info.size),
        modified,
        table.num_rows,
        delta_stats(table, stats_columns),
    )
