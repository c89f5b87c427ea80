"""FastThetaJoin's baselines on Spark: CFS, 1-Bucket-Theta, Spark's own plan and the cross product."""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from outoforder.core.theta.plan import (
    JoinStats,
    Theta,
    one_bucket_shape,
)
from outoforder.spark.theta.fast import side_stats
from outoforder.spark.theta.result import ThetaResult, condition, empty_result, valid_values

_SEED = 17  # 1-Bucket-Theta's random row/column choice: fixed so reruns shuffle alike


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
    cond = (ra["_rcell"] == sa["_scell"]) & condition(ra, sa, on, theta)
    out = ra.join(sa, cond).select(*[ra[c] for c in r.columns], *[sa[c] for c in s.columns])
    return out, rows * cols, n_r * cols + n_s * rows


def one_bucket(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    """1-Bucket-Theta (Okcan & Riedewald 2011): random rows and columns of an r×c matrix of regions."""
    r, s = r.where(valid_values(on[0])), s.where(valid_values(on[1]))
    n_r, n_s = r.count(), s.count()  # the region shape needs |R| and |S|
    stats = JoinStats(rows_compared=n_r * n_s)
    out, regions, replicated = _one_bucket_rows(r, s, on, theta, partitions, n_r, n_s)
    stats.partition_pairs, stats.replicated_rows = regions, replicated
    return ThetaResult(out, stats, "one-bucket")


def cfs(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    """CFS (Liu et al. 2017): a global sort, the min/max cross filter, then 1-Bucket-Theta."""
    r_sorted = r.where(valid_values(on[0])).orderBy(on[0]).persist(StorageLevel.MEMORY_AND_DISK)
    s_sorted = s.where(valid_values(on[1])).orderBy(on[1]).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [r_sorted, s_sorted]
    rs, ss = side_stats(r_sorted, s_sorted, on)
    n_r, n_s = rs.n, ss.n
    stats = JoinStats()
    if n_r == 0 or n_s == 0:
        res = empty_result(r, s, stats, "cfs")
        res.cached = cached
        return res
    (rb_lo, rb_hi), (sb_lo, sb_hi) = theta.cross_bounds(rs.lo, rs.hi, ss.lo, ss.hi)
    rv, sv = F.col(on[0]).cast("double"), F.col(on[1]).cast("double")
    r_kept = r_sorted.where((rv >= rb_lo) & (rv <= rb_hi))
    s_kept = s_sorted.where((sv >= sb_lo) & (sv <= sb_hi))
    k_r, k_s = r_kept.count(), s_kept.count()
    stats.r_filtered, stats.s_filtered = n_r - k_r, n_s - k_s
    stats.rows_compared = k_r * k_s
    out, regions, replicated = _one_bucket_rows(r_kept, s_kept, on, theta, partitions, k_r, k_s)
    stats.partition_pairs, stats.replicated_rows = regions, replicated
    return ThetaResult(out, stats, "cfs", cached)


def spark_sql(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    """Spark's own plan for the non-equi join."""
    r, s = r.where(valid_values(on[0])), s.where(valid_values(on[1]))
    out = r.join(s, condition(r, s, on, theta))
    return ThetaResult(out.select(*r.columns, *s.columns), JoinStats(), "spark-sql")


def cross(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    """DirectCrossProduct: the shuffled Cartesian product, θ tested on every pair."""
    r, s = r.where(valid_values(on[0])), s.where(valid_values(on[1]))
    out = r.join(s.hint("shuffle_replicate_nl"), condition(r, s, on, theta))
    return ThetaResult(out.select(*r.columns, *s.columns), JoinStats(), "cross")
