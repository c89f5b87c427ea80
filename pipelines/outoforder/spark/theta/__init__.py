"""θ-joins ``R.a θ S.b`` of two windowed datasets on Spark: FastThetaJoin and its baselines.

Every method takes the same inputs (two DataFrames with disjoint column names, the join column of
each, a :class:`~outoforder.core.theta.plan.Theta`) and returns a :class:`ThetaResult`: the joined
rows as a lazy DataFrame (every column of both sides) and the run's counters. Rows whose join
value is null or NaN never match (Spark orders NaN above every number, so they are dropped first).

- ``fast``: FastThetaJoin (docs/theta.md). One job collects per side the rows, min, max and a
  quantile sample of the join values; the driver applies the cross filter to the ranges, chooses
  the range partitions (equal widths, or quantiles where values are skewed; as few as the size
  needs) and keeps the partition pairs whose ranges can satisfy θ
  (:mod:`outoforder.core.theta.plan`). In the second job every row is sent to the pairs its
  partition is in. A *full* pair is every combination, with no test, in the JVM (an explode of
  the broadcast S partitions, or an equi-join on the pair number); a *partial* pair of an
  inequality is an equi-join on the pair number that tests θ, in the JVM; a *partial* pair of
  ``=`` or a band is joined in Arrow on the executors, by sorting
  (:mod:`outoforder.core.theta.sortjoin`), at a cost in proportion to its input and output.
- ``cfs``: CFS (Liu et al. 2017): a global sort of both sides, the min/max cross filter, then
  1-Bucket-Theta on what is left.
- ``one-bucket``: 1-Bucket-Theta (Okcan & Riedewald 2011): the |R|×|S| matrix cut into r×c
  regions; each R row goes to a random row of regions, each S row to a random column; every region
  tests θ on all its pairs.
- ``spark-sql``: Spark's own plan for the non-equi join (a broadcast nested loop join here).
- ``cross``: DirectCrossProduct: the shuffled Cartesian product, θ tested on every pair.

The θ column expression and the counters are shared; the plan and the pair join are pure numpy
in :mod:`outoforder.core.theta`, tested against the brute-force oracle.
"""

from outoforder.spark.theta.join import METHODS, theta_join
from outoforder.spark.theta.multiway import MultiwayResult, multiway_join
from outoforder.spark.theta.result import ThetaResult, theta_column

__all__ = ["METHODS", "MultiwayResult", "ThetaResult", "multiway_join", "theta_column", "theta_join"]
