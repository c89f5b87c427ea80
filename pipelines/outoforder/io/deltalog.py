"""What a Delta table's log says, read without Spark: its newest version and transaction ids.

A writer that tags its appends with Delta's transaction identifiers (``txnAppId``/``txnVersion``)
can ask, before it computes anything, whether the table has committed that transaction already:
a rerun of a processed interval then neither computes its rows nor writes. Spark answers only by
writing (Delta skips the commit), and a Spark Connect client has no access to Delta's own
snapshot API, so the answer is read here from the log itself (the Delta protocol's
``_delta_log`` folder): the version checksum of the newest commit when it lists the table's
transactions, else the newest checkpoint's ``txn`` actions and the commits after it. The log is
reached with pyarrow's filesystems (a local folder, or the object store of an ``s3a://`` lake).

Only what the protocol guarantees is relied upon: commit files ``<version>.json`` (one action per
line), checkpoints (classic, multi-part, and V2 whose ``txn`` actions are in the top-level file),
``_last_checkpoint`` as a hint, and ``<version>.crc`` only when it holds ``setTransactions``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from outoforder.config import StorageSettings, is_remote
from outoforder.errors import ConfigError, StateError
from outoforder.io.files import filesystem

LOG = "_delta_log"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKSUM = re.compile(r"^(\d{20})\.crc$")
# classic (N.checkpoint.parquet), multi-part (N.checkpoint.i.n.parquet), V2 (N.checkpoint.uuid.json|parquet)
_CHECKPOINT = re.compile(
    r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.([0-9a-fA-F-]{36}))?\.(parquet|json)$"
)


@dataclass(frozen=True)
class _Listing:
    commits: dict[int, str]  # version -> file path
    checksums: dict[int, str]
    checkpoints: dict[int, list[str]]  # version -> its complete set of files


def _storage_for(table_path: str, storage: StorageSettings | None) -> StorageSettings:
    if storage is None:
        if is_remote(table_path):
            msg = f"reading the Delta log of {table_path} needs the object store's settings"
            raise ConfigError(msg)
        return StorageSettings()
    return storage


def _list(fs: pafs.FileSystem, log: str) -> _Listing | None:
    infos = fs.get_file_info(pafs.FileSelector(log, allow_not_found=True))
    if not infos:
        return None
    commits: dict[int, str] = {}
    checksums: dict[int, str] = {}
    parts: dict[tuple[int, str], list[str]] = {}
    expected: dict[tuple[int, str], int] = {}
    for info in infos:
        name = info.base_name
        if m := _COMMIT.match(name):
            commits[int(m.group(1))] = info.path
        elif m := _CHECKSUM.match(name):
            checksums[int(m.group(1))] = info.path
        elif m := _CHECKPOINT.match(name):
            version = int(m.group(1))
            if m.group(3):  # multi-part: complete only with every part
                key = (version, f"multi-{int(m.group(3))}")
                expected[key] = int(m.group(3))
            else:
                key = (version, name)
                expected[key] = 1
            parts.setdefault(key, []).append(info.path)
    checkpoints: dict[int, list[str]] = {}
    for (version, _), files in parts.items():
        if len(files) == expected[(version, _)] and version not in checkpoints:
            checkpoints[version] = sorted(files)
    return _Listing(commits, checksums, checkpoints)


def newest_version(table_path: str, storage: StorageSettings | None = None) -> int | None:
    """The table's newest committed version (None: no Delta table there).

    >>> import tempfile
    >>> newest_version(tempfile.mkdtemp()) is None
    True
    """
    fs, path = filesystem(table_path, _storage_for(table_path, storage))
    listing = _list(fs, f"{path.rstrip('/')}/{LOG}")
    if listing is None:
        return None
    known = [*listing.commits, *listing.checkpoints]
    return max(known) if known else None


def _read_text(fs: pafs.FileSystem, path: str) -> str:
    with fs.open_input_stream(path) as fh:
        return bytes(fh.read()).decode("utf-8")


def _txns_in_lines(text: str, into: dict[str, int]) -> None:
    for line in text.splitlines():
        if '"txn"' not in line:
            continue
        action = json.loads(line).get("txn")
        if action is not None:
            into[str(action["appId"])] = int(action["version"])


def _txns_in_checkpoint(fs: pafs.FileSystem, files: list[str], into: dict[str, int]) -> None:
    for f in files:
        if f.endswith(".json"):  # a V2 checkpoint in JSON: actions as lines
            _txns_in_lines(_read_text(fs, f), into)
            continue
        schema = pq.read_schema(f, filesystem=fs)
        if "txn" not in schema.names:
            continue
        for t in pq.read_table(f, columns=["txn"], filesystem=fs).column("txn").to_pylist():
            if t is not None and t.get("appId") is not None:
                into[str(t["appId"])] = int(t["version"])


def transactions(table_path: str, storage: StorageSettings | None = None) -> dict[str, int]:
    """Every transaction id the table has committed, with its newest version (``{}``: none, or no table)."""
    fs, path = filesystem(table_path, _storage_for(table_path, storage))
    listing = _list(fs, f"{path.rstrip('/')}/{LOG}")
    if listing is None or not (listing.commits or listing.checkpoints):
        return {}
    newest = max([*listing.commits, *listing.checkpoints])
    crc = listing.checksums.get(newest)
    if crc is not None:
        checksum = json.loads(_read_text(fs, crc))
        if "setTransactions" in checksum:  # written only when the table has few of them
            return {str(t["appId"]): int(t["version"]) for t in checksum["setTransactions"] or []}
    found: dict[str, int] = {}
    base = max((v for v in listing.checkpoints if v <= newest), default=-1)
    if base >= 0:
        _txns_in_checkpoint(fs, listing.checkpoints[base], found)
    for version in range(base + 1, newest + 1):
        commit = listing.commits.get(version)
        if commit is None:
            msg = f"the Delta log of {table_path} lacks commit {version} (checkpoint {base}, newest {newest})"
            raise StateError(msg)
        _txns_in_lines(_read_text(fs, commit), found)
    return found


def committed_version(table_path: str, app_id: str, storage: StorageSettings | None = None) -> int | None:
    """The newest version committed under transaction id ``app_id`` (None: none, or no table)."""
    return transactions(table_path, storage).get(app_id)


def _user_metadata(text: str) -> str | None:
    for line in text.splitlines():
        if '"commitInfo"' in line:
            info = json.loads(line).get("commitInfo") or {}
            value = info.get("userMetadata")
            return None if value is None else str(value)
    return None


def tagged_commits(
    table_path: str, tag: str, after: int, storage: StorageSettings | None = None
) -> list[int]:
    """The versions after ``after`` whose commit carries ``tag`` as its user metadata.

    A writer that tags its appends (:func:`outoforder.io.delta.append`) finds here whether an
    attempt that did not finish (killed after this commit, before the next) already wrote; only
    the commits after ``after`` are read, one small file each.
    """
    fs, path = filesystem(table_path, _storage_for(table_path, storage))
    listing = _list(fs, f"{path.rstrip('/')}/{LOG}")
    if listing is None:
        return []
    return [
        v
        for v in sorted(listing.commits)
        if v > after and _user_metadata(_read_text(fs, listing.commits[v])) == tag
    ]


def first_tagged(table_path: str, tags: set[str], storage: StorageSettings | None = None) -> str | None:
    """Which of ``tags`` the oldest commit still in the log carries (None: none of them).

    For the rare race of two writers that claimed the same thing by tagged appends: the first
    commit wins, for every reader alike.
    """
    fs, path = filesystem(table_path, _storage_for(table_path, storage))
    listing = _list(fs, f"{path.rstrip('/')}/{LOG}")
    if listing is None:
        return None
    for v in sorted(listing.commits):
        tag = _user_metadata(_read_text(fs, listing.commits[v]))
        if tag in tags:
            return tag
    return None


def own_commit(table_path: str, tag: str, storage: StorageSettings | None = None, look_back: int = 64) -> int:
    """The newest version whose commit carries ``tag`` (a writer's own, just made), among the newest few."""
    fs, path = filesystem(table_path, _storage_for(table_path, storage))
    listing = _list(fs, f"{path.rstrip('/')}/{LOG}")
    if listing is not None:
        for v in sorted(listing.commits, reverse=True)[:look_back]:
            if _user_metadata(_read_text(fs, listing.commits[v])) == tag:
                return v
    msg = f"no commit tagged {tag!r} among the newest {look_back} of {table_path}"
    raise StateError(msg)
