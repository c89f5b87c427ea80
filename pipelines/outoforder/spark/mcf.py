"""Pre-filters for multi-way equi-joins on Spark: MCF (cuckoo filters) and an exact semi-join.

Before ``F0.k0 = F1.k1 = … = Fn.kn`` a row whose key is absent from *another* frame can never be
in the result, so it may be dropped before the join's shuffle. Three ways:

- ``mcf``: every frame's cuckoo filter is built on the executors in one job: key hashes are
  shuffled into shards (``hash mod shards``) and each task builds the filters of its shards;
  only the filters reach the driver, which turns each into a small DataFrame (a row per shard:
  its bucket count and its table of fingerprints). Each frame keeps the rows whose key may be in
  every other frame's filter, asked in frame order so that later filters see only the survivors,
  as MCF does. The asking is a broadcast semi-join whose condition is the filter's lookup in
  Spark SQL (the filters hash with Spark's XXH64, :func:`~outoforder.core.mcf.cuckoo.xxh64`), so
  the frames' rows never pass through Python. False positives only keep a row that the join
  then drops, so the join's output is unchanged;
- ``semi``: exact, each frame's distinct key hashes (aggregated and checkpointed on the executors)
  broadcast into a hash semi-join of the others (no false positives; 64 bits per distinct key:
  the exact baseline, for key sets a broadcast can hold). The checkpoint gives the key sets a
  lineage of their own: a semi-join on the frames themselves would put each frame into the
  others' plans, which the θ-join's later self-joins of those frames cannot tell apart;
- ``none``: nothing dropped.

**The cost check.** A pre-filter costs a pass over every frame's keys before the join; it pays
only if it keeps enough bytes out of the join's shuffle. Two gates, said by
:meth:`PrefilterStats.line` when they skip:

1. before any pass, Spark's size estimate of a row (from the frames' schemas): rows narrower than
   :data:`MIN_BYTES_SAVED_PER_ROW` cannot save that much per row even if every row is dropped;
2. the pass that builds the tables also counts each frame's rows and keys and keeps a bottom-k
   sample (the :data:`SAMPLE_KEYS` smallest key hashes with their row counts). All frames'
   samples are complete below the smallest of their k-th hashes, so the rows kept are estimated
   on that common slice of the key space, multiplicities included. Below ``min_drop``
   (:data:`MIN_DROP`) of the rows dropped, or :data:`MIN_BYTES_SAVED_PER_ROW` bytes saved per
   row, the tables are not used.

Keys are hashed with Spark's ``xxhash64`` after normalising ``-0.0`` to ``0.0`` (the join treats
them as equal); null and NaN keys never join (as in :mod:`outoforder.spark.theta`), so they are
dropped by every pre-filter.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.core.mcf.cuckoo import CuckooFilter
from outoforder.errors import ConfigError
from outoforder.spark.estimates import UNKNOWN_BYTES, estimated_bytes, parallelism, row_size
from outoforder.spark.session import side_by_side

log = logging.getLogger(__name__)

METHODS = ("none", "mcf", "semi")
MIN_DROP = 0.2  # the share of rows a pre-filter must be expected to drop to be worth its pass
# ... and the bytes it must be expected to keep out of the join's shuffle per row, by Spark's
# estimate of a row: its pass reads the keys and the probe still decodes every row, so narrow rows
# lose; the break-even on local cores is measured in docs/benchmarks/mcf.md. A cluster, whose
# shuffle crosses the network, gains sooner: lower it there.
MIN_BYTES_SAVED_PER_ROW = 256.0
KEYS_PER_SHARD = 1 << 20  # distinct keys per filter shard (one task builds one shard)
SAMPLE_KEYS = 4096  # bottom-k sample per frame for the cost check
_H = "_mcf_key_hash"


@dataclass
class PrefilterStats:
    """Rows in and kept per frame, the cost check's estimate, and (MCF) the filters' size and rate."""

    method: str
    rows_in: list[int] = field(default_factory=list)
    rows_kept: list[int] = field(default_factory=list)
    distinct_keys: list[int] = field(default_factory=list)  # counted by the pass that builds the tables
    filter_bytes: int = 0
    fpr_bound: float = 0.0
    estimated_kept: float | None = None  # share of all rows the cost check expects to survive
    row_bytes: float | None = None  # Spark's size estimate per row (from the schemas), over all frames
    applied: bool = False  # False: method none, or skipped by the cost check
    shards: int = 0

    def line(self) -> str:
        """One line for the run's summary: what was done and why."""
        if self.method == "none":
            return "[prefilter] none"
        width = f"rows of about {self.row_bytes or 0:.0f} bytes (Spark's estimate)"
        if self.estimated_kept is None:
            return (
                f"[prefilter] {self.method} skipped before its pass: {width} cannot keep the "
                f"{MIN_BYTES_SAVED_PER_ROW:.0f} bytes per row out of the join's shuffle that pay for it"
            )
        est = f"estimated to keep {self.estimated_kept:.1%} of the rows (a bottom-{SAMPLE_KEYS} key sample)"
        if not self.applied:
            saved = (1.0 - self.estimated_kept) * (self.row_bytes or 0.0)
            return (
                f"[prefilter] {self.method} skipped: {est}, {width}: it would keep {saved:.0f} bytes "
                f"per row out of the join's shuffle, under the {MIN_BYTES_SAVED_PER_ROW:.0f} (and "
                f"{MIN_DROP:.0%} of the rows) that pay for it"
            )
        built = f"{len(self.distinct_keys)} filters of {self.filter_bytes:,} bytes in {self.shards} shards"
        kept = f"; kept {sum(self.rows_kept):,} of {sum(self.rows_in):,} rows" if self.rows_kept else ""
        return f"[prefilter] {self.method}: {est}; {built}{kept}"


def key_hash(col: str) -> Column:
    """The 64-bit hash a key is filtered by (null for null and NaN keys, which never join)."""
    c = F.col(col)
    norm = F.when(c == F.lit(0.0), F.lit(0.0)).otherwise(c)
    return F.when(c.isNull() | F.isnan(c), F.lit(None).cast("long")).otherwise(F.xxhash64(norm))


def _hashed(df: DataFrame, col: str) -> DataFrame:
    return df.select(key_hash(col).alias(_H)).where(F.col(_H).isNotNull())


def estimate_kept(
    rows: Sequence[int], samples: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]
) -> float:
    """The share of the rows (with a key) whose key is in every frame, from bottom-k samples.

    ``samples[i]`` holds frame i's smallest key hashes (sorted, at most :data:`SAMPLE_KEYS`) and
    each one's row count. Below the smallest of the frames' largest sampled hashes every sample is
    complete, so on that slice the shared keys, and the rows they carry in each frame, are exact;
    each frame's share kept is the share of its sampled rows there.

    >>> a = (np.array([1, 2, 3]), np.array([5, 1, 1]))
    >>> b = (np.array([1, 3, 9]), np.array([1, 1, 1]))
    >>> round(estimate_kept([7, 3], [a, b]), 3)  # a keeps 6 of its 7 rows (keys 1, 3); b 2 of 3
    0.8
    """
    total = sum(rows)
    if not total or any(k.size == 0 for k, _ in samples):
        return 0.0
    # a sample smaller than k is the frame's whole key set: complete everywhere
    whole = np.iinfo(np.int64).max
    top = min(int(k[-1]) if k.size >= SAMPLE_KEYS else whole for k, _ in samples)
    cut = [(k[k <= top], c[k <= top]) for k, c in samples]
    shared = cut[0][0]
    for k, _ in cut[1:]:
        shared = np.intersect1d(shared, k, assume_unique=True)
    kept = 0.0
    for n, (k, c) in zip(rows, cut, strict=True):
        seen = float(c.sum())
        kept += n * float(c[np.isin(k, shared, assume_unique=True)].sum()) / seen if seen else 0.0
    return kept / total


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

    ``count_rows`` counts the rows in and kept (two jobs per frame) for the statistics. The cost
    check (module doc) applies the pre-filter when it is expected to drop at least
    ``min_drop`` of the rows and keep :data:`MIN_BYTES_SAVED_PER_ROW` bytes per row out of the
    join's shuffle; ``min_drop = 0`` applies it whatever the estimate.
    """
    if method not in METHODS:
        msg = f"unknown pre-filter {method!r}: use one of {', '.join(METHODS)}"
        raise ConfigError(msg)
    if len(frames) != len(cols) or len(frames) < 2:
        msg = f"need two or more frames and one key column each, got {len(frames)} and {len(cols)}"
        raise ConfigError(msg)
    if method == "mcf" and not 2 <= fingerprint_bits <= 32:
        msg = f"fingerprint_bits must be 2..32, got {fingerprint_bits}"
        raise ConfigError(msg)
    stats = PrefilterStats(method)
    out = list(frames)
    if method != "none":
        stats.row_bytes = _row_bytes(frames)
        if min_drop <= 0 or stats.row_bytes >= MIN_BYTES_SAVED_PER_ROW:
            tables = _tables(frames, cols, method, bucket_size, fingerprint_bits, stats)
            dropped = 1.0 - (stats.estimated_kept or 0.0)
            if min_drop <= 0 or (
                dropped >= min_drop and dropped * stats.row_bytes >= MIN_BYTES_SAVED_PER_ROW
            ):
                out = _filtered(frames, cols, tables, method, bucket_size, fingerprint_bits)
                stats.applied = True
    if count_rows:
        stats.rows_in = [f.count() for f in frames]
        stats.rows_kept = [f.count() for f in out]
    log.info("%s", stats.line())
    return out, stats


def _row_bytes(frames: Sequence[DataFrame]) -> float:
    """Spark's size estimate of a row (8 bytes of header and each column's default size), averaged."""
    return sum(row_size(f) for f in frames) / len(frames)


def _filtered(
    frames: Sequence[DataFrame], cols: Sequence[str], tables: list[Table], method: str, b: int, fbits: int
) -> list[DataFrame]:
    """Each frame semi-joined with every *other* frame's membership table, broadcast.

    The probe is Spark's own broadcast join and expressions, so no row of a frame meets Python.
    """
    out = []
    for i, (f, c) in enumerate(zip(frames, cols, strict=True)):
        kept = _probe_columns(f, c, method, fbits)
        for j in range(len(frames)):  # MCF's early stop: later tables see only the survivors
            if j != i:
                kept = _semi(kept, tables[j], method, b)
        out.append(kept.drop(*_PROBE))
    return out


@dataclass
class Table:
    """One frame's membership table as a small DataFrame, and the shards its keys are spread over."""

    rows: DataFrame
    shards: int = 1


_BUILT = (
    "_frame int, _shard int, rows long, distinct long, buckets long, table array<int>, "
    "sample array<long>, counts array<long>"
)
_TABLE = "_shard int, buckets long, table array<int>"


def _tables(
    frames: Sequence[DataFrame], cols: Sequence[str], method: str, b: int, fbits: int, stats: PrefilterStats
) -> list[Table]:
    """Every frame's membership table, from one job; ``stats`` gets the counts and the estimate.

    ``mcf``: a frame's key hashes are spread over shards (``hash(key) mod shards``, about
    :data:`KEYS_PER_SHARD` keys each, from Spark's size estimate; a frame of one shard is read by
    one task, without a shuffle) and the task of a shard builds its cuckoo filter, counts its
    rows and keys and keeps its bottom-k sample. Only those reach the driver, which turns the
    filters into one small DataFrame per frame (a row per shard). ``semi``: each frame's distinct
    key hashes with their row counts, checkpointed on the executors, and their bottom-k sample.
    """
    spark = frames[0].sparkSession
    if method == "semi":

        def exact(i: int) -> tuple[DataFrame, Any, Any]:
            # kept on the executors, with a lineage of its own (Spark's self-join check, module doc)
            keys = _hashed(frames[i], cols[i]).groupBy(_H).count().localCheckpoint()
            sample = keys.orderBy(_H).limit(SAMPLE_KEYS).toArrow()
            return keys, sample, keys.agg(F.count(F.lit(1)), F.sum("count")).first()

        got = side_by_side(spark, exact, range(len(frames)), len(frames))
        stats.distinct_keys = [int(n[0]) for _, _, n in got]
        stats.filter_bytes = 8 * sum(stats.distinct_keys)
        samples = [(t.column(_H).to_numpy(), t.column("count").to_numpy()) for _, t, _ in got]
        stats.estimated_kept = estimate_kept([int(n[1] or 0) for _, _, n in got], samples)
        return [Table(keys.select(_H)) for keys, _, _ in got]
    shards = [_shards(f) for f in frames]

    def build(i: int) -> Any:
        keyed = _hashed(frames[i], cols[i]).select(
            F.lit(i).alias("_frame"),
            F.pmod(F.hash(F.col(_H)), F.lit(shards[i])).cast("int").alias("_shard"),
            _H,
        )
        # a task per shard (hash(key) mod n, as Spark's hash partitioning); one shard: no shuffle
        keyed = keyed.coalesce(1) if shards[i] == 1 else keyed.repartition(shards[i], _H)
        return keyed.mapInArrow(_shard_builder(b, fbits), _BUILT).toArrow()

    # a job per frame, submitted together: a union of single-partition inputs would be run as
    # one partition by Spark 4 (it keeps the children's common partitioning), in one task
    per_frame = side_by_side(spark, build, range(len(frames)), len(frames))
    samples = []
    for mine in per_frame:
        keys, counts = _flat(mine.column("sample")), _flat(mine.column("counts"))
        order = np.argsort(keys)[:SAMPLE_KEYS]
        samples.append((keys[order], counts[order]))
    keyed = [int(pc.sum(t.column("rows")).as_py() or 0) for t in per_frame]
    stats.distinct_keys = [int(pc.sum(t.column("distinct")).as_py() or 0) for t in per_frame]
    stats.estimated_kept = estimate_kept(keyed, samples)
    stats.shards = sum(shards)
    stats.filter_bytes = 4 * sum(
        int(pc.sum(pc.list_value_length(t.column("table"))).as_py() or 0) for t in per_frame
    )
    stats.fpr_bound = CuckooFilter(1, b, fbits).fpr_bound
    return [
        Table(_local(spark, t.select(["_shard", "buckets", "table"]), _TABLE), n)
        for t, n in zip(per_frame, shards, strict=True)
    ]


def _flat(lists: Any) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The values of an Arrow list<long> column, every row's after the other."""
    return np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=np.int64)


def _shards(df: DataFrame) -> int:
    """Filter shards for a frame: about :data:`KEYS_PER_SHARD` rows each, from Spark's size estimate."""
    size = estimated_bytes(df)
    if size == UNKNOWN_BYTES:  # Spark cannot tell: one shard per core
        return parallelism(df.sparkSession)
    return max(1, math.ceil(size / row_size(df) / KEYS_PER_SHARD))


def _local(spark: Any, rows: pa.Table, schema: str) -> DataFrame:
    """A small DataFrame of driver-side rows (Arrow cannot build one from zero rows)."""
    if rows.num_rows == 0:
        return spark.createDataFrame([], schema)  # type: ignore[no-any-return]
    return spark.createDataFrame(rows.combine_chunks(), schema)  # type: ignore[no-any-return]


def _shard_builder(b: int, fbits: int) -> Any:
    """The executors' side of :func:`_tables`: per (frame, shard) a task holds, its filter and counts.

    A filter that needed its stash is rebuilt twice as large, so the probe (Spark expressions over
    the table) never has a stash to look at.
    """

    def build(batches: Iterator[Any]) -> Iterator[Any]:
        got = [pa.Table.from_batches([x]) for x in batches]
        if not got:
            return
        t = pa.concat_tables(got)
        frame, shard = t.column("_frame").to_numpy(), t.column("_shard").to_numpy()
        h = t.column(_H).to_numpy()
        group = frame.astype(np.int64) << 32 | shard.astype(np.int64)
        for g in np.unique(group):
            keys, counts = np.unique(h[group == g], return_counts=True)
            cap = max(int(keys.size), 1)
            while True:
                cf = CuckooFilter(cap, b, fbits)
                cf.insert(keys)
                if not cf.full:
                    break
                cap *= 2
            table = cf.table.ravel().view(np.int32)  # the probe compares fingerprints as ints
            yield pa.RecordBatch.from_pydict(
                {
                    "_frame": pa.array([g >> 32], pa.int32()),
                    "_shard": pa.array([g & 0xFFFFFFFF], pa.int32()),
                    "rows": pa.array([int(counts.sum())], pa.int64()),
                    "distinct": pa.array([keys.size], pa.int64()),
                    "buckets": pa.array([cf.buckets], pa.int64()),
                    "table": _one_list(table, pa.int32()),
                    "sample": _one_list(keys[:SAMPLE_KEYS], pa.int64()),  # np.unique sorts: the smallest
                    "counts": _one_list(counts[:SAMPLE_KEYS].astype(np.int64), pa.int64()),
                }
            )

    return build


def _one_list(values: np.ndarray[Any, Any], kind: Any) -> Any:
    """A one-row Arrow list column holding ``values`` (no copy through Python lists)."""
    return pa.ListArray.from_arrays(pa.array([0, values.size], pa.int32()), pa.array(values, kind))


_H0, _FP, _FPH = "_mcf_key", "_mcf_fp", "_mcf_fp_hash"
_PROBE = (_H0, _H, _FP, _FPH)


def _probe_columns(df: DataFrame, col: str, method: str, fbits: int) -> DataFrame:
    """``df`` without null keys, with what a lookup needs per row as columns (dropped afterwards).

    ``mcf``: :meth:`CuckooFilter.contains` in Spark SQL: the filter hashes the key hash with the
    same XXH64 (seed 0: nothing XORed in); the fingerprint is the high 32 bits modulo ``2^f − 1``,
    plus 1, compared as the table's int; the buckets come from :func:`_found`. Each value is a
    column of its own, referenced by name: as one nested expression Spark would compute the shared
    parts several times, and the join's generated code would outgrow what the JIT compiles.
    """
    keyed = df.withColumn(_H0, key_hash(col)).where(F.col(_H0).isNotNull())
    if method != "mcf":
        return keyed
    fp = F.pmod(F.shiftrightunsigned(F.col(_H), 32), F.lit(2**fbits - 1)) + 1
    as_int = (
        F.col(_FP) if fbits < 32 else F.when(F.col(_FP) >= 2**31, F.col(_FP) - 2**32).otherwise(F.col(_FP))
    )
    return (
        keyed.withColumn(_H, F.xxhash64(F.col(_H0)))
        .withColumn(_FP, fp)
        .withColumn(_FPH, F.xxhash64(F.col(_FP)))
        .withColumn(_FP, as_int.cast("int"))
    )


def _semi(df: DataFrame, table: Table, method: str, b: int) -> DataFrame:
    """The rows of ``df`` (with :func:`_probe_columns`) whose key may be in ``table``.

    ``mcf``: an inner broadcast join on the shard (one table row per shard), then the lookup as a
    filter, then ``df``'s columns: the same rows as a semi-join with the lookup as its condition,
    which Spark 4.2 runs about twice as slowly.
    """
    t = table.rows
    if method != "mcf":
        return df.join(F.broadcast(t), F.col(_H0) == t[_H], "left_semi")
    on = F.pmod(F.hash(F.col(_H0)), F.lit(table.shards)).cast("int") == t["_shard"]
    mask = t["buckets"] - 1
    first = F.col(_H).bitwiseAND(mask)
    second = first.bitwiseXOR(F.col(_FPH).bitwiseAND(mask))
    hit = F.array_contains(F.slice(t["table"], first * b + 1, b), F.col(_FP)) | F.array_contains(
        F.slice(t["table"], second * b + 1, b), F.col(_FP)
    )
    return df.join(F.broadcast(t), on).where(hit).select(*[df[c] for c in df.columns])
