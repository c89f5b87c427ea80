"""Pre-filters for multi-way equi-joins on Spark: MCF (cuckoo filters) and an exact semi-join.

Before ``F0.k0 = F1.k1 = … = Fn.kn`` a row whose key is absent from *another* frame can never be
in the result, so it may be dropped before the join's shuffle. Three ways:

- ``mcf``: the distinct key hashes of every frame go to the driver, each frame gets a cuckoo
  filter (:class:`~outoforder.core.mcf.cuckoo.CuckooFilter`), the filters are broadcast as bytes,
  and each frame keeps the rows whose key may be in every other frame's filter (asked in frame
  order, stopping at the first "absent", as MCF does). False positives only keep a row that the
  join then drops, so the join's output is unchanged;
- ``semi``: exact, a broadcast semi-join: the same, with each frame's sorted distinct key hashes
  instead of a filter (no false positives; 64 bits per distinct key). A semi-join written as
  DataFrame joins would put each frame into the others' plans, which the θ-join's later
  self-joins of those frames cannot tell apart;
- ``none``: nothing dropped.

Keys are hashed with Spark's ``xxhash64`` after normalising ``-0.0`` to ``0.0`` (the join treats
them as equal); null and NaN keys never join (as in :mod:`outoforder.spark.theta`), so they are
dropped by every pre-filter.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.core.mcf.cuckoo import CuckooFilter
from outoforder.errors import ConfigError

METHODS = ("none", "mcf", "semi")
_H = "_mcf_key_hash"


@dataclass
class PrefilterStats:
    """Rows in and kept per frame, and (for MCF) the filters' size and expected false positives."""

    method: str
    rows_in: list[int] = field(default_factory=list)
    rows_kept: list[int] = field(default_factory=list)
    distinct_keys: list[int] = field(default_factory=list)
    filter_bytes: int = 0
    fpr_bound: float = 0.0


def key_hash(col: str) -> Column:
    """The 64-bit hash a key is filtered by (null for null and NaN keys, which never join)."""
    c = F.col(col)
    norm = F.when(c == F.lit(0.0), F.lit(0.0)).otherwise(c)
    return F.when(c.isNull() | F.isnan(c), F.lit(None).cast("long")).otherwise(F.xxhash64(norm))


def _distinct_hashes(df: DataFrame, col: str) -> np.ndarray[Any, np.dtype[np.int64]]:
    rows = df.select(key_hash(col).alias(_H)).where(F.col(_H).isNotNull()).distinct().toPandas()
    return rows[_H].to_numpy(dtype=np.int64)


def prefilter(
    frames: Sequence[DataFrame],
    cols: Sequence[str],
    method: str = "mcf",
    bucket_size: int = 4,
    fingerprint_bits: int = 16,
    count_rows: bool = True,
) -> tuple[list[DataFrame], PrefilterStats]:
    """Each frame without the rows whose key is absent from another frame (see the module doc).

    ``count_rows`` counts rows in and kept (two more jobs per frame) for the statistics.
    """
    if method not in METHODS:
        msg = f"unknown pre-filter {method!r}: use one of {', '.join(METHODS)}"
        raise ConfigError(msg)
    if len(frames) != len(cols) or len(frames) < 2:
        msg = f"need two or more frames and one key column each, got {len(frames)} and {len(cols)}"
        raise ConfigError(msg)
    stats = PrefilterStats(method)
    out = (
        list(frames)
        if method == "none"
        else _filtered(frames, cols, method, bucket_size, fingerprint_bits, stats)
    )
    if count_rows:
        stats.rows_in = [f.count() for f in frames]
        stats.rows_kept = [f.count() for f in out]
    return out, stats


def _filtered(
    frames: Sequence[DataFrame], cols: Sequence[str], method: str, b: int, fbits: int, stats: PrefilterStats
) -> list[DataFrame]:
    """Broadcast one membership structure per frame and keep rows every *other* frame may hold."""
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.sql.types import BooleanType

    blobs = []
    for f, c in zip(frames, cols, strict=True):
        keys = _distinct_hashes(f, c)
        stats.distinct_keys.append(int(keys.size))
        if method == "mcf":
            cf = CuckooFilter(max(int(keys.size), 1), b, fbits)
            cf.insert(keys)
            stats.fpr_bound = cf.fpr_bound
            blobs.append(cf.to_bytes())
        else:  # the exact key set, sorted (a broadcast semi-join)
            blobs.append(np.sort(keys).astype("<i8").tobytes())
    stats.filter_bytes = sum(len(x) for x in blobs)
    shared = frames[0].sparkSession.sparkContext.broadcast(blobs)
    out = []
    for i, (f, c) in enumerate(zip(frames, cols, strict=True)):
        keep = _keeper(shared, method, [j for j in range(len(frames)) if j != i])
        udf = pandas_udf(keep, BooleanType())  # type: ignore[call-overload]
        hashed = key_hash(c)
        # a null in a long column reaches pandas as float64 and would round the hashes: the UDF
        # sees only non-null values, and the null keys (which never join) are dropped beside it
        out.append(f.where(hashed.isNotNull() & udf(F.coalesce(hashed, F.lit(0).cast("long")))))
    return out


def _member(method: str, blob: bytes) -> Any:
    """A vectorised ``keys -> may be present`` test from a broadcast blob."""
    if method == "mcf":
        return CuckooFilter.from_bytes(blob).contains
    known = np.frombuffer(blob, dtype="<i8")

    def exact(keys: np.ndarray[Any, np.dtype[np.int64]]) -> np.ndarray[Any, np.dtype[np.bool_]]:
        at = np.searchsorted(known, keys).clip(0, max(known.size - 1, 0))
        return np.asarray((known[at] == keys) if known.size else np.zeros(keys.size, dtype=bool))

    return exact


def _keeper(shared: Any, method: str, others: list[int]) -> Any:
    """The pandas UDF body for one frame: True where the key may be in every other frame."""

    def keep(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        # one deserialisation per task, then vectorised lookups batch by batch
        tests = [_member(method, shared.value[j]) for j in others]
        for h in batches:
            keys = h.to_numpy(dtype=np.int64)
            alive = np.arange(keys.size)
            for test in tests:  # MCF's early stop: later frames see only the survivors
                if alive.size == 0:
                    break
                alive = alive[test(keys[alive])]
            mask = np.zeros(h.size, dtype=bool)
            mask[alive] = True
            yield pd.Series(mask)

    return keep
