"""One θ-join of two DataFrames with one of the methods (:data:`METHODS`)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from outoforder.core.theta.plan import (
    ROWS_PER_PARTITION,
    Theta,
)
from outoforder.errors import ConfigError
from outoforder.spark.theta.baselines import cfs, cross, one_bucket, spark_sql
from outoforder.spark.theta.fast import NESTED_LOOP_PAIRS, fast_join
from outoforder.spark.theta.result import ThetaResult

METHODS = ("fast", "cfs", "one-bucket", "spark-sql", "cross")


def theta_join(
    r: DataFrame,
    s: DataFrame,
    on: tuple[str, str],
    theta: Theta,
    method: str = "fast",
    partitions: int = 8,
    rows_per_partition: int = ROWS_PER_PARTITION,
    nested_loop_pairs: int = NESTED_LOOP_PAIRS,
) -> ThetaResult:
    """Join ``r`` and ``s`` on ``r[on[0]] θ s[on[1]]`` with one of :data:`METHODS`.

    ``partitions`` is the most range partitions FastThetaJoin uses (1-Bucket-Theta's and CFS's
    regions); it uses fewer where the sides hold fewer than ``rows_per_partition`` rows each
    (:func:`~outoforder.core.theta.plan.partitions_for`). An inequality whose sides make at most
    ``nested_loop_pairs`` combinations by Spark's estimates (S small enough to broadcast) is
    FastThetaJoin's broadcast nested loop (0: always partition).
    """
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
    if method == "fast":
        return fast_join(r, s, on, theta, partitions, rows_per_partition, nested_loop_pairs)
    return _RUNNERS[method](r, s, on, theta, partitions)


_RUNNERS: dict[str, Callable[[DataFrame, DataFrame, tuple[str, str], Theta, int], ThetaResult]] = {
    "cfs": cfs,
    "one-bucket": one_bucket,
    "spark-sql": spark_sql,
    "cross": cross,
}
