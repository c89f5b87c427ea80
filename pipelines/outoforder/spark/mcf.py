"""Pre-filters for multi-way equi-joins on Spark: MCF (cuckoo filters) and an exact semi-join.

Before ``F0.k0 = F1.k1 = … = Fn.kn`` a row whose key is absent from *another* frame can never be
in the result, so it may be dropped before the join's shuffle. Three ways:

- ``mcf``: each frame's cuckoo filter is built on the executors: its key hashes are shuffled
  into shards (``hash mod shards``) and each task builds the filter of its shard
  (:class:`~outoforder.core.mcf.cuckoo.ShardedFilter`); only the filters reach the driver, which
  broadcasts them. Each frame keeps the rows whose key may be in every other frame's filter
  (asked in frame order, stopping at the first "absent", as MCF does). False positives only keep
  a row that the join then drops, so the join's output is unchanged;
- ``semi``: exact, a broadcast semi-join: the same with each frame's sorted distinct key hashes
  (no false positives; 64 bits per distinct key, which pass through the driver: the exact
  baseline, for small key sets). A semi-join written as DataFrame joins would put each frame
  into the others' plans, which the θ-join's later self-joins of those frames cannot tell apart;
- ``none``: nothing dropped.

**The cost check.** A pre-filter costs a pass over every frame before the join; it pays only if
it keeps enough bytes out of the join's shuffle. One job first estimates, per frame, its rows and
distinct keys, and the keys every frame shares, from HyperLogLog sketches (Spark's
``hll_sketch_agg``; the intersection by inclusion–exclusion over the unions). Where the estimated
share of rows dropped is below ``min_drop`` (:data:`MIN_DROP`), or the bytes it would save per row
(that share times Spark's size estimate per row) are below :data:`MIN_BYTES_SAVED_PER_ROW`, the
pre-filter is skipped, and :meth:`PrefilterStats.line` says so with the estimate.

Keys are hashed with Spark's ``xxhash64`` after normalising ``-0.0`` to ``0.0`` (the join treats
them as equal); null and NaN keys never join (as in :mod:`outoforder.spark.theta`), so they are
dropped by every pre-filter.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.core.mcf.cuckoo import CuckooFilter, ShardedFilter
from outoforder.errors import ConfigError

log = logging.getLogger(__name__)

METHODS = ("none", "mcf", "semi")
MIN_DROP = 0.2  # the share of rows a pre-filter must be expected to drop to be worth its pass
# ... and the bytes it must be expected to keep out of the join's shuffle per row it reads: building
# the filters (hash, shuffle the hashes, build) and asking them (a pandas UDF) cost about three
# times what the join's shuffle costs per row of 24 bytes (docs/benchmarks/mcf.md, 2 cores)
MIN_BYTES_SAVED_PER_ROW = 64.0
KEYS_PER_SHARD = 1 << 20  # distinct keys per filter shard (one task builds one shard)
_LG_K = 14  # HyperLogLog sketches of 2^14 registers: about 0.8 % error per distinct count
_H = "_mcf_key_hash"


@dataclass
class PrefilterStats:
    """Rows in and kept per frame, the cost check's estimate, and (MCF) the filters' size and rate."""

    method: str
    rows_in: list[int] = field(default_factory=list)
    rows_kept: list[int] = field(default_factory=list)
    distinct_keys: list[int] = field(default_factory=list)  # estimated (HLL); exact for semi
    filter_bytes: int = 0
    fpr_bound: float = 0.0
    estimated_kept: float | None = None  # share of all rows the cost check expects to survive
    row_bytes: float | None = None  # Spark's size estimate per row, over all frames
    applied: bool = False  # False: method none, or skipped by the cost check
    shards: int = 0

    def line(self) -> str:
        """One line for the run's summary: what was done and why."""
        if self.method == "none":
            return "[prefilter] none"
        est = f"estimated to keep {self.estimated_kept:.1%} of the rows (HyperLogLog)"
        if not self.applied:
            saved = (1.0 - (self.estimated_kept or 0.0)) * (self.row_bytes or 0.0)
            return (
                f"[prefilter] {self.method} skipped: {est} of about {self.row_bytes or 0:.0f} bytes: it "
                f"would keep {saved:.0f} bytes per row out of the join's shuffle, under the "
                f"{MIN_BYTES_SAVED_PER_ROW:.0f} (and {MIN_DROP:.0%} of the rows) that pay for its pass"
            )
        built = f"{len(self.distinct_keys)} filters of {self.filter_bytes:,} bytes in {self.shards} shards"
        kept = f"; kept {sum(self.rows_kept):,} of {sum(self.rows_in):,} rows" if self.rows_in else ""
        return f"[prefilter] {self.method}: {est}; {built}{kept}"


def key_hash(col: str) -> Column:
    """The 64-bit hash a key is filtered by (null for null and NaN keys, which never join)."""
    c = F.col(col)
    norm = F.when(c == F.lit(0.0), F.lit(0.0)).otherwise(c)
    return F.when(c.isNull() | F.isnan(c), F.lit(None).cast("long")).otherwise(F.xxhash64(norm))


def _hashed(df: DataFrame, col: str) -> DataFrame:
    return df.select(key_hash(col).alias(_H)).where(F.col(_H).isNotNull())


def _distinct_hashes(df: DataFrame, col: str) -> np.ndarray[Any, np.dtype[np.int64]]:
    rows = _hashed(df, col).distinct().toPandas()
    return rows[_H].to_numpy(dtype=np.int64)


def estimate_overlap(frames: Sequence[DataFrame], cols: Sequence[str]) -> tuple[list[int], list[int], float]:
    """Per frame its rows and (estimated) distinct keys, and the share of all rows expected to survive.

    One job builds a HyperLogLog sketch of every frame's keys; the keys all frames share are
    ``Σ (−1)^(|U|+1) |∪U|`` over the non-empty sets U of frames (inclusion–exclusion), each union
    estimated from the merged sketches. A frame's rows are assumed spread evenly over its keys.
    """
    tagged = None
    for i, (f, c) in enumerate(zip(frames, cols, strict=True)):
        one = f.select(F.lit(i).alias("_frame"), key_hash(c).alias(_H))
        tagged = one if tagged is None else tagged.unionByName(one)
    assert tagged is not None
    got = {
        r["_frame"]: r
        for r in tagged.groupBy("_frame")
        .agg(F.count(F.lit(1)).alias("rows"), F.hll_sketch_agg(_H, _LG_K).alias("sk"))
        .collect()
    }
    rows = [int(got[i]["rows"]) if i in got else 0 for i in range(len(frames))]
    sketches = [got[i]["sk"] if i in got and got[i]["sk"] is not None else None for i in range(len(frames))]
    if any(sk is None for sk in sketches):  # a frame without a valid key: nothing can join
        return rows, [0] * len(frames), 0.0
    spark = frames[0].sparkSession
    lit = [F.lit(bytearray(sk or b"")) for sk in sketches]
    subsets = [u for k in range(1, len(frames) + 1) for u in itertools.combinations(range(len(frames)), k)]
    exprs = []
    for u in subsets:
        merged = lit[u[0]]
        for j in u[1:]:
            merged = F.hll_union(merged, lit[j])
        exprs.append(F.hll_sketch_estimate(merged))
    est = spark.range(1).select(*exprs).first()
    assert est is not None
    union = {u: float(est[k]) for k, u in enumerate(subsets)}
    shared = max(0.0, sum((-1) ** (len(u) + 1) * n for u, n in union.items()))
    distinct = [max(1, round(union[(i,)])) for i in range(len(frames))]
    total = sum(rows)
    kept = (
        sum(r * min(1.0, shared / d) for r, d in zip(rows, distinct, strict=True)) / total if total else 0.0
    )
    return rows, distinct, kept


def prefilter(
    frames: Sequence[DataFrame],
    cols: Sequence[str],
    method: str = "mcf",
    bucket_size: int = 4,
    fingerprint_bits: int = 16,
    count_rows: bool = True,
    min_drop: float = MIN_DROP,
) -> tuple[list[DataFrame], PrefilterStats]:
    """Each frame without the rows whose key is absent from another frame (see the module doc).

    ``count_rows`` counts rows in and kept (two more jobs per frame) for the statistics. The cost
    check applies the pre-filter when it is expected to drop at least ``min_drop`` of the rows and,
    where Spark can estimate the rows' size, to keep :data:`MIN_BYTES_SAVED_PER_ROW` bytes per row
    out of the join's shuffle; ``min_drop = 0`` applies it whatever the estimate.
    """
    if method not in METHODS:
        msg = f"unknown pre-filter {method!r}: use one of {', '.join(METHODS)}"
        raise ConfigError(msg)
    if len(frames) != len(cols) or len(frames) < 2:
        msg = f"need two or more frames and one key column each, got {len(frames)} and {len(cols)}"
        raise ConfigError(msg)
    stats = PrefilterStats(method)
    out, rows = list(frames), None
    if method != "none":
        rows, stats.distinct_keys, stats.estimated_kept = estimate_overlap(frames, cols)
        stats.row_bytes = _row_bytes(frames, rows)
        dropped = 1.0 - stats.estimated_kept
        # bytes kept out of the shuffle, where Spark can tell the rows' size
        pays = not stats.row_bytes or dropped * stats.row_bytes >= MIN_BYTES_SAVED_PER_ROW
        if min_drop <= 0 or (dropped >= min_drop and pays):
            out = _filtered(frames, cols, method, bucket_size, fingerprint_bits, stats)
            stats.applied = True
    if count_rows:
        stats.rows_in = rows or [f.count() for f in frames]
        stats.rows_kept = [f.count() for f in out]
    log.info("%s", stats.line())
    return out, stats


def _row_bytes(frames: Sequence[DataFrame], rows: list[int]) -> float:
    """Bytes per row over all frames, from Spark's size estimates (0 when it cannot tell)."""
    from outoforder.spark.theta import estimated_bytes

    sizes = [estimated_bytes(f) for f in frames]
    if not sum(rows) or any(b >= (1 << 62) for b in sizes):
        return 0.0
    return sum(sizes) / sum(rows)


def _filtered(
    frames: Sequence[DataFrame], cols: Sequence[str], method: str, b: int, fbits: int, stats: PrefilterStats
) -> list[DataFrame]:
    """Broadcast one membership structure per frame and keep rows every *other* frame may hold."""
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.sql.types import BooleanType

    blobs = []
    for f, c, distinct in zip(frames, cols, stats.distinct_keys, strict=True):
        if method == "mcf":
            shards = max(1, math.ceil(distinct / KEYS_PER_SHARD))
            blobs.append(_sharded_filter(f, c, shards, b, fbits))
            stats.shards += shards
            stats.fpr_bound = CuckooFilter(1, b, fbits).fpr_bound
        else:  # the exact key set, sorted (a broadcast semi-join)
            keys = _distinct_hashes(f, c)
            blobs.append(np.sort(keys).astype("<i8").tobytes())
    if method == "semi":
        stats.distinct_keys = [len(x) // 8 for x in blobs]
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


def _sharded_filter(df: DataFrame, col: str, shards: int, b: int, fbits: int) -> bytes:
    """One frame's filter, built by the executors shard by shard; the driver joins the shards' bytes."""
    shard = F.pmod(F.col(_H), F.lit(shards)).cast("int")
    keyed = _hashed(df, col).withColumn("_shard", shard).repartition(shards, "_shard")
    got = keyed.mapInArrow(_shard_builder(shards, b, fbits), "_shard int, filter binary").collect()
    parts = {int(r["_shard"]): bytes(r["filter"]) for r in got}
    empty = CuckooFilter(1, b, fbits).to_bytes()
    return ShardedFilter([CuckooFilter.from_bytes(parts.get(k, empty)) for k in range(shards)]).to_bytes()


def _shard_builder(shards: int, b: int, fbits: int) -> Any:
    """The executors' side of :func:`_sharded_filter`: a cuckoo filter per shard a task holds."""

    def build(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        keys = [
            np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64) for batch in batches
        ]
        every = np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)
        owner = np.mod(every, shards)
        ids, blobs = [], []
        for s in np.unique(owner):
            mine = every[owner == s]
            cf = CuckooFilter(max(int(mine.size), 1), b, fbits)
            cf.insert(mine)
            ids.append(int(s))
            blobs.append(cf.to_bytes())
        yield pa.RecordBatch.from_pydict(
            {"_shard": ids, "filter": blobs},
            schema=pa.schema([("_shard", pa.int32()), ("filter", pa.binary())]),
        )

    return build


def _member(method: str, blob: bytes) -> Any:
    """A vectorised ``keys -> may be present`` test from a broadcast blob."""
    if method == "mcf":
        return ShardedFilter.from_bytes(blob).contains
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
