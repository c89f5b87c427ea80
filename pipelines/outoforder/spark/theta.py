"""θ-joins ``R.a θ S.b`` of two windowed datasets on Spark: FastThetaJoin and its baselines.

Every method takes the same inputs (two DataFrames with disjoint column names, the join column of
each, a :class:`~outoforder.core.theta.plan.Theta`) and returns a :class:`ThetaResult`: the joined
rows as a lazy DataFrame (every column of both sides) and the run's counters. Rows whose join
value is null or NaN never match (Spark orders NaN above every number, so they are dropped first).

- ``fast``: FastThetaJoin (docs/operators.md). One job collects min, max and counts per side; the cross
  filter keeps the value ranges that can match; a second job counts rows, min and max per range
  partition and slot (a value sub-range and a hash); the driver splits oversized partitions into
  near-equal units ordered by value (skew), and
  keeps only the unit pairs whose ranges can satisfy θ (:func:`plan_pairs`). Each row is then sent
  to the pairs its unit is in and the pairs are joined on their id: *full* pairs emit every
  combination without a θ test, *partial* pairs test θ per row.
- ``cfs``: CFS (Liu et al. 2017): a global sort of both sides, the min/max cross filter, then
  1-Bucket-Theta on what is left.
- ``one-bucket``: 1-Bucket-Theta (Okcan & Riedewald 2011): the |R|×|S| matrix cut into r×c
  regions; each R row goes to a random row of regions, each S row to a random column; every region
  tests θ on all its pairs.
- ``spark-sql``: Spark's own plan for the non-equi join (a broadcast nested loop join here).
- ``cross``: DirectCrossProduct: the shuffled Cartesian product, θ tested on every pair.

The θ column expression and the counters are shared; the plan itself is pure numpy-free Python in
:mod:`outoforder.core.theta.plan`, tested against the brute-force oracle.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.core.theta.plan import (
    FINE,
    HASH,
    SLOTS,
    JoinStats,
    PairPlan,
    Theta,
    Unit,
    one_bucket_shape,
    plan_pairs,
    units_from_slots,
)
from outoforder.errors import ConfigError

METHODS = ("fast", "cfs", "one-bucket", "spark-sql", "cross")
_SEED = 17  # 1-Bucket-Theta's random row/column choice: fixed so reruns shuffle alike


@dataclass
class ThetaResult:
    """The joined rows (lazy) and the run's counters; :meth:`release` frees cached inputs."""

    rows: DataFrame
    stats: JoinStats
    method: str
    cached: list[DataFrame] = field(default_factory=list)

    def count(self) -> int:
        """Run the join and count its rows (sets ``stats.output_rows``)."""
        self.stats.output_rows = self.rows.count()
        return self.stats.output_rows

    def release(self) -> None:
        """Unpersist what the method cached (the CFS sort, multi-way intermediate results)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


def theta_column(theta: Theta, a: Column, b: Column) -> Column:
    """``a θ b`` as a Spark column (the same operators as :meth:`Theta.holds`)."""
    if theta.op == "<":
        return a < b
    if theta.op == "<=":
        return a <= b
    if theta.op == ">=":
        return a >= b
    if theta.op == ">":
        return a > b
    if theta.op == "=":
        return a == b
    return F.abs(a - b) <= F.lit(theta.band)


def theta_join(
    r: DataFrame,
    s: DataFrame,
    on: tuple[str, str],
    theta: Theta,
    method: str = "fast",
    partitions: int = 8,
) -> ThetaResult:
    """Join ``r`` and ``s`` on ``r[on[0]] θ s[on[1]]`` with one of :data:`METHODS`."""
    if method not in METHODS:
        msg = f"unknown θ-join method {method!r}; known: {', '.join(METHODS)}"
        raise ConfigError(msg)
    if partitions < 1:
        msg = f"need at least one partition, got {partitions}"
        raise ConfigError(msg)
    clash = set(r.columns) & set(s.columns)
    if clash:
        msg = f"the two sides share column names {sorted(clash)}: prefix them before a θ-join"
        raise ConfigError(msg)
    for df, col in ((r, on[0]), (s, on[1])):
        if col not in df.columns:
            msg = f"join column {col!r} not in {df.columns}"
            raise ConfigError(msg)
    return _RUNNERS[method](r, s, on, theta, partitions)


def _valid(col: str) -> Column:
    c = F.col(col)
    return c.isNotNull() & ~F.isnan(c)


def _condition(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta) -> Column:
    return theta_column(theta, r[on[0]].cast("double"), s[on[1]].cast("double"))


def _side_stats(r: DataFrame, s: DataFrame, on: tuple[str, str]) -> list[tuple[int, int, float, float]]:
    """Per side (R, S): valid rows, null/NaN rows, min, max, in one job."""
    both = r.select(F.lit(0).alias("_side"), F.col(on[0]).cast("double").alias("_v")).unionByName(
        s.select(F.lit(1).alias("_side"), F.col(on[1]).cast("double").alias("_v"))
    )
    ok = _valid("_v")
    got = {
        row["_side"]: row
        for row in both.groupBy("_side")
        .agg(
            F.count(F.when(ok, 1)).alias("n"),
            F.count(F.when(~ok, 1)).alias("nulls"),
            F.min(F.when(ok, F.col("_v"))).alias("lo"),
            F.max(F.when(ok, F.col("_v"))).alias("hi"),
        )
        .collect()
    }
    out = []
    for side in (0, 1):
        row = got.get(side)
        if row is None:
            out.append((0, 0, math.nan, math.nan))
        else:
            out.append((int(row["n"]), int(row["nulls"]), row["lo"], row["hi"]))
    return out


def _empty(r: DataFrame, s: DataFrame, stats: JoinStats, method: str) -> ThetaResult:
    return ThetaResult(r.crossJoin(s).limit(0), stats, method)


def _fast(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    (n_r, nul_r, r_lo, r_hi), (n_s, nul_s, s_lo, s_hi) = _side_stats(r, s, on)
    stats = JoinStats(null_rows=nul_r + nul_s)
    if n_r == 0 or n_s == 0:
        return _empty(r, s, stats, "fast")
    (rb_lo, rb_hi), (sb_lo, sb_hi) = theta.cross_bounds(r_lo, r_hi, s_lo, s_hi)
    r_rng, s_rng = (max(r_lo, rb_lo), min(r_hi, rb_hi)), (max(s_lo, sb_lo), min(s_hi, sb_hi))
    if r_rng[0] > r_rng[1] or s_rng[0] > s_rng[1]:
        stats.r_filtered, stats.s_filtered = n_r, n_s
        return _empty(r, s, stats, "fast")
    lo, hi = min(r_rng[0], s_rng[0]), max(r_rng[1], s_rng[1])
    with_np = math.isfinite(hi - lo) and hi > lo
    span = (hi - lo) / partitions if with_np else 1.0

    def placed(df: DataFrame, col: str, rng: tuple[float, float]) -> DataFrame:
        v = F.col(col).cast("double")
        pos = F.least(F.greatest((v - F.lit(lo)) / F.lit(span), F.lit(0.0)), F.lit(float(partitions)))
        pid = F.least(F.floor(pos), F.lit(partitions - 1)) if with_np else F.lit(0).cast("long")
        fine = F.least(F.floor((pos - pid) * FINE), F.lit(FINE - 1)) if with_np else F.lit(0).cast("long")
        slot = fine * HASH + F.pmod(F.xxhash64(*[F.col(c) for c in df.columns]), F.lit(HASH))
        keep = _valid(col) & (v >= F.lit(rng[0])) & (v <= F.lit(rng[1]))
        return df.where(keep).withColumn("_pid", pid).withColumn("_slot", slot)

    rp, sp = placed(r, on[0], r_rng), placed(s, on[1], s_rng)
    per_slot = (
        rp.select(F.lit(0).alias("_side"), "_pid", "_slot", F.col(on[0]).cast("double").alias("_v"))
        .unionByName(
            sp.select(F.lit(1).alias("_side"), "_pid", "_slot", F.col(on[1]).cast("double").alias("_v"))
        )
        .groupBy("_side", "_pid", "_slot")
        .agg(F.count(F.lit(1)).alias("n"), F.min("_v").alias("lo"), F.max("_v").alias("hi"))
        .collect()
    )
    rows: tuple[list[tuple[int, int, int, float, float]], ...] = ([], [])
    for row in per_slot:
        rows[row["_side"]].append((row["_pid"], row["_slot"], row["n"], row["lo"], row["hi"]))
    kept_r, kept_s = sum(x[2] for x in rows[0]), sum(x[2] for x in rows[1])
    stats.r_filtered, stats.s_filtered = n_r - kept_r, n_s - kept_s
    if kept_r == 0 or kept_s == 0:
        return _empty(r, s, stats, "fast")
    plan = plan_pairs(
        units_from_slots(rows[0], kept_r, partitions), units_from_slots(rows[1], kept_s, partitions), theta
    )
    stats.partition_pairs = len(plan.pairs)
    stats.full_pairs = sum(full for _, _, full in plan.pairs)
    stats.rows_compared = plan.rows_compared
    stats.replicated_rows = plan.replicated_rows
    stats.sub_partitions = list(Counter((0, u.pid) for u in plan.r_units).values()) + list(
        Counter((1, u.pid) for u in plan.s_units).values()
    )
    if not plan.pairs:
        return _empty(r, s, stats, "fast")
    ra = _to_pairs(rp, plan, partitions, "r").withColumnRenamed("_pair", "_rpair")
    full = _literal_array([int(f) for _, _, f in plan.pairs], "array<int>")
    ra = ra.withColumn("_full", F.element_at(full, F.col("_rpair") + 1) == 1)
    sa = _to_pairs(sp, plan, partitions, "s").withColumnRenamed("_pair", "_spair")
    cond = (ra["_rpair"] == sa["_spair"]) & (ra["_full"] | _condition(ra, sa, on, theta))
    out = ra.join(sa, cond).select(*[ra[c] for c in r.columns], *[sa[c] for c in s.columns])
    return ThetaResult(out, stats, "fast")


def _literal_array(values: Sequence[int], sql_type: str) -> Column:
    """A constant int array from one string literal (folded once by the optimizer).

    One py4j call instead of one per element: with 64 partitions a routing table has thousands.
    """
    return F.split(F.lit(",".join(map(str, values))), ",").cast(sql_type)


def _to_pairs(df: DataFrame, plan: PairPlan, partitions: int, side: str) -> DataFrame:
    """Send every row to the pairs its unit is in: one row per pair, in an int column ``_pair``.

    The routing is constant arrays in the projection (no lookup join, no broadcast job):
    ``unit[pid · SLOTS + slot]``, then that unit's run ``[start, start + count)`` of the
    pair ids listed unit by unit.
    """
    units: list[Unit] = plan.r_units if side == "r" else plan.s_units
    unit_of = [0] * (partitions * SLOTS)
    for k, u in enumerate(units):
        for slot in u.slots or range(SLOTS):
            unit_of[u.pid * SLOTS + slot] = k
    pairs_of: list[list[int]] = [[] for _ in units]
    for k, (a, b, _) in enumerate(plan.pairs):
        pairs_of[a if side == "r" else b].append(k)
    starts: list[int] = []
    flat: list[int] = []
    for ids in pairs_of:
        starts.append(len(flat) + 1)
        flat.extend(ids)
    unit = F.element_at(
        _literal_array(unit_of, "array<int>"), (F.col("_pid") * SLOTS + F.col("_slot")).cast("int") + 1
    )
    start = F.element_at(_literal_array(starts, "array<int>"), unit + 1)
    count = F.element_at(_literal_array([len(x) for x in pairs_of], "array<int>"), unit + 1)
    # a unit in no pair has count 0: its rows drop out in the explode
    mine = F.slice(_literal_array(flat, "array<int>"), start, count)
    return df.withColumn("_pair", F.explode(mine)).drop("_pid", "_slot")


def _one_bucket_rows(
    r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int, n_r: int, n_s: int
) -> tuple[DataFrame, int, int]:
    """1-Bucket-Theta's region join; returns the rows, the regions used and the replicated rows."""
    rows, cols = one_bucket_shape(partitions, n_r, n_s)
    r_band = F.floor(F.rand(_SEED) * rows).cast("long")
    s_band = F.floor(F.rand(_SEED + 1) * cols).cast("long")
    ra = r.withColumn("_rb", r_band).withColumn(
        "_rcell", F.explode(F.array(*[F.col("_rb") * cols + j for j in range(cols)]))
    )
    sa = s.withColumn("_sb", s_band).withColumn(
        "_scell", F.explode(F.array(*[F.lit(i * cols) + F.col("_sb") for i in range(rows)]))
    )
    cond = (ra["_rcell"] == sa["_scell"]) & _condition(ra, sa, on, theta)
    out = ra.join(sa, cond).select(*[ra[c] for c in r.columns], *[sa[c] for c in s.columns])
    return out, rows * cols, n_r * cols + n_s * rows


def _one_bucket(
    r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int
) -> ThetaResult:
    r, s = r.where(_valid(on[0])), s.where(_valid(on[1]))
    n_r, n_s = r.count(), s.count()  # the region shape needs |R| and |S|
    stats = JoinStats(rows_compared=n_r * n_s)
    out, regions, replicated = _one_bucket_rows(r, s, on, theta, partitions, n_r, n_s)
    stats.partition_pairs, stats.replicated_rows = regions, replicated
    return ThetaResult(out, stats, "one-bucket")


def _cfs(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    r_sorted = r.where(_valid(on[0])).orderBy(on[0]).persist(StorageLevel.MEMORY_AND_DISK)
    s_sorted = s.where(_valid(on[1])).orderBy(on[1]).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [r_sorted, s_sorted]
    (n_r, _, r_lo, r_hi), (n_s, _, s_lo, s_hi) = _side_stats(r_sorted, s_sorted, on)
    stats = JoinStats()
    if n_r == 0 or n_s == 0:
        res = _empty(r, s, stats, "cfs")
        res.cached = cached
        return res
    (rb_lo, rb_hi), (sb_lo, sb_hi) = theta.cross_bounds(r_lo, r_hi, s_lo, s_hi)
    rv, sv = F.col(on[0]).cast("double"), F.col(on[1]).cast("double")
    r_kept = r_sorted.where((rv >= rb_lo) & (rv <= rb_hi))
    s_kept = s_sorted.where((sv >= sb_lo) & (sv <= sb_hi))
    k_r, k_s = r_kept.count(), s_kept.count()
    stats.r_filtered, stats.s_filtered = n_r - k_r, n_s - k_s
    stats.rows_compared = k_r * k_s
    out, regions, replicated = _one_bucket_rows(r_kept, s_kept, on, theta, partitions, k_r, k_s)
    stats.partition_pairs, stats.replicated_rows = regions, replicated
    return ThetaResult(out, stats, "cfs", cached)


def _spark_sql(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    r, s = r.where(_valid(on[0])), s.where(_valid(on[1]))
    out = r.join(s, _condition(r, s, on, theta))
    return ThetaResult(out.select(*r.columns, *s.columns), JoinStats(), "spark-sql")


def _cross(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    r, s = r.where(_valid(on[0])), s.where(_valid(on[1]))
    out = r.join(s.hint("shuffle_replicate_nl"), _condition(r, s, on, theta))
    return ThetaResult(out.select(*r.columns, *s.columns), JoinStats(), "cross")


_RUNNERS: dict[str, Callable[[DataFrame, DataFrame, tuple[str, str], Theta, int], ThetaResult]] = {
    "fast": _fast,
    "cfs": _cfs,
    "one-bucket": _one_bucket,
    "spark-sql": _spark_sql,
    "cross": _cross,
}


@dataclass
class MultiwayResult:
    """The final rows (lazy), the counters of every pairwise join by round, cached intermediates."""

    rows: DataFrame
    rounds: list[list[JoinStats]]
    cached: list[DataFrame] = field(default_factory=list)

    def release(self) -> None:
        """Unpersist the intermediate results (after the final rows have been used)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


_Group = tuple[int, int, DataFrame]  # first and last frame index in the group, its rows


def multiway_join(
    frames: Sequence[DataFrame],
    cols: Sequence[str],
    thetas: Sequence[Theta],
    method: str = "fast",
    partitions: int = 8,
) -> MultiwayResult:
    """``F0.c0 θ0 F1.c1 θ1 F2.c2 …`` as the seed's pairwise tree.

    Round by round, neighbouring groups are joined two by two on the predicate that links them,
    the pairs of a round concurrently (one driver thread each); every intermediate result is
    materialized (cached), because the next round's plan needs its min and max. An odd group out
    waits for the next round. The last join stays lazy.
    """
    if len(frames) < 2 or len(cols) != len(frames) or len(thetas) != len(frames) - 1:
        msg = (
            "a multi-way θ-join needs n >= 2 frames, n columns and n - 1 predicates; "
            f"got {len(frames)}, {len(cols)}, {len(thetas)}"
        )
        raise ConfigError(msg)
    groups: list[_Group] = [(i, i, f) for i, f in enumerate(frames)]
    result = MultiwayResult(frames[0], [])

    def join_pair(left: _Group, right: _Group, materialize: bool) -> tuple[_Group, JoinStats]:
        res = theta_join(
            left[2], right[2], (cols[left[1]], cols[right[0]]), thetas[left[1]], method, partitions
        )
        rows = res.rows
        result.cached.extend(res.cached)
        if materialize:
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
            result.cached.append(rows)
            res.stats.output_rows = rows.count()
        return (left[0], right[1], rows), res.stats

    try:
        while len(groups) > 1:
            materialize = len(groups) > 2
            with ThreadPoolExecutor(max_workers=len(groups) // 2) as pool:
                futures = [
                    pool.submit(join_pair, groups[k], groups[k + 1], materialize)
                    for k in range(0, len(groups) - 1, 2)
                ]
                done = [f.result() for f in futures]
            result.rounds.append([stats for _, stats in done])
            groups = [g for g, _ in done] + ([groups[-1]] if len(groups) % 2 else [])
    except BaseException:
        result.release()
        raise
    result.rows = groups[0][2]
    return result
