"""Files that Spark tasks (and the driver's look at Delta's log) read themselves: raw input files.

Ingest parses raw files inside Spark tasks; :mod:`outoforder.io.deltalog` reads a table's log.
Paths are local paths, ``file:`` URIs or ``s3a://bucket/key`` URIs (the lake and landing zone on
MinIO); the object store is reached with pyarrow's S3 client and the project's storage settings.
Nothing here imports Spark: this code runs in the executors' Python workers.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import IO
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from outoforder.config import StorageSettings
from outoforder.errors import ConfigError, InputError


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
        # buffered: Arrow's files have no readline (io.UnsupportedOperation, an OSError, which the
        # line reader would take for a corrupt file)
        return io.BufferedReader(fs.open_input_file(path), buffer_size=1 << 20)
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


def staging_root(lake_root: Path | str) -> str:
    """The folder under the lake where stages keep rows between their jobs (every executor sees it).

    >>> staging_root("s3a://lake/main/"), staging_root("/tmp/lake")
    ('s3a://lake/main/_staging', '/tmp/lake/_staging')
    """
    root = str(lake_root)
    return f"{root.rstrip('/')}/_staging" if "://" in root else str(Path(root) / "_staging")


def staging_uri(lake_root: Path | str, name: str) -> str:
    """One stage run's folder, ``<lake>/_staging/<name>``.

    >>> staging_uri("s3a://lake/main", "ingest-1"), staging_uri("/tmp/lake", "ingest-1")
    ('s3a://lake/main/_staging/ingest-1', '/tmp/lake/_staging/ingest-1')
    """
    return f"{staging_root(lake_root)}/{name}"


def staging_name(prefix: str, now_s: float) -> str:
    """A staging folder's name: ``prefix``, its start (whole seconds) and a random part.

    >>> staging_name("ingest", 1700000000.5)[:18]
    'ingest-1700000000-'
    """
    return f"{prefix}-{int(now_s)}-{uuid.uuid4().hex}"


def remove_stale_staging(
    lake_root: Path | str, storage: StorageSettings, prefix: str, older_than_s: float, now_s: float
) -> list[str]:
    """Delete the staging folders of ``prefix`` started more than ``older_than_s`` before ``now_s``.

    A run removes its own folder when it ends, also on an error; a killed process leaves it. The
    start is read from the name (:func:`staging_name`); a folder named otherwise is left alone.
    Returns the names removed.
    """
    fs, base = filesystem(staging_root(lake_root), storage)
    if fs.get_file_info(base).type != pafs.FileType.Directory:
        return []
    removed = []
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=False)):
        parts = info.base_name.split("-")
        if info.type != pafs.FileType.Directory or len(parts) != 3 or parts[0] != prefix:
            continue
        if parts[1].isdigit() and now_s - int(parts[1]) > older_than_s:
            fs.delete_dir(info.path)
            removed.append(info.base_name)
    return removed


def remove_tree(uri: str, storage: StorageSettings) -> None:
    """Delete a folder and everything in it, if it is there (local, ``file:`` or ``s3a://``)."""
    fs, path = filesystem(uri, storage)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        fs.delete_dir(path)
