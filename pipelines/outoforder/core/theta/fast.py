"""FastThetaJoin set at a time in numpy: the plan of :mod:`outoforder.core.theta.plan`, run.

The reference of the Spark operator (:mod:`outoforder.spark.theta`): the same cross filter, cuts,
pair classes and per-pair routing, with exact quantiles where Spark samples approximate ones.

>>> import numpy as np
>>> from outoforder.core.theta.plan import Theta
>>> r, s = np.array([1.0, 5.0, 9.0]), np.array([2.0, 6.0])
>>> run = fast_theta_join(r, s, Theta.parse(">"), partitions=2)
>>> run.pairs.tolist(), run.stats.output_rows, run.stats.partitioning
([[1, 0], [2, 0], [2, 1]], 3, 'range')
"""

from __future__ import annotations

import numpy as np

from outoforder.core.theta.plan import (
    SAMPLE_PER_PARTITION,
    FloatArray,
    IntArray,
    JoinStats,
    PairArray,
    Theta,
    ThetaRun,
    ValueSummary,
    choose_cuts,
    plan_pairs,
    side_units,
)
from outoforder.core.theta.sortjoin import sorted_join
from outoforder.errors import ConfigError

_NONE = np.zeros((0, 2), dtype=np.int64)


def fast_theta_join(r: FloatArray, s: FloatArray, theta: Theta, partitions: int) -> ThetaRun:
    """Every ``(i, j)`` with ``r[i] θ s[j]``, sorted, and the plan's counters."""
    if partitions < 1:
        msg = f"need at least one partition, got {partitions}"
        raise ConfigError(msg)
    r = np.asarray(r, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    stats = JoinStats(null_rows=int(np.isnan(r).sum() + np.isnan(s).sum()))
    ri, si = np.nonzero(~np.isnan(r))[0], np.nonzero(~np.isnan(s))[0]
    if ri.size == 0 or si.size == 0:
        return ThetaRun(_NONE, stats)
    r_rng, s_rng = theta.matching_ranges(
        float(r[ri].min()), float(r[ri].max()), float(s[si].min()), float(s[si].max())
    )
    sample = ValueSummary.of(np.concatenate([r[ri], s[si]]), SAMPLE_PER_PARTITION * partitions).sample
    keep_r = (r[ri] >= r_rng[0]) & (r[ri] <= r_rng[1])
    keep_s = (s[si] >= s_rng[0]) & (s[si] <= s_rng[1])
    stats.r_filtered, stats.s_filtered = int((~keep_r).sum()), int((~keep_s).sum())
    ri, si = ri[keep_r], si[keep_s]
    if ri.size == 0 or si.size == 0:
        return ThetaRun(_NONE, stats)
    cuts = choose_cuts(sample, min(r_rng[0], s_rng[0]), max(r_rng[1], s_rng[1]), partitions)
    stats.partitions, stats.partitioning = cuts.partitions, cuts.kind
    plan = plan_pairs(side_units(cuts, *r_rng), side_units(cuts, *s_rng), theta)
    stats.partition_pairs = len(plan.pairs)
    stats.full_pairs = sum(full for _, _, full in plan.pairs)
    r_part, s_part = cuts.assign(r[ri], _hash(ri)), cuts.assign(s[si], _hash(si))
    out: list[PairArray] = []
    for a, b, full in plan.pairs:
        ua, ub = plan.r_units[a], plan.s_units[b]
        x, y = ri[r_part == ua.pid], si[s_part == ub.pid]
        if not full:  # only the rows that can meet the other unit's range are sent to the pair
            (xl, xh), (yl, yh) = theta.cross_bounds(ua.lo, ua.hi, ub.lo, ub.hi)
            x, y = x[(r[x] >= xl) & (r[x] <= xh)], y[(s[y] >= yl) & (s[y] <= yh)]
        stats.replicated_rows += x.size + y.size
        if full:
            ii, jj = np.repeat(x, y.size), np.tile(y, x.size)
        else:
            m = sorted_join(r[x], s[y], theta)
            stats.rows_compared += m.tested
            ii, jj = x[m.r], y[m.s]
        out.append(np.stack([ii, jj], axis=1))
    pairs = np.concatenate(out) if out else _NONE
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))] if pairs.size else _NONE
    stats.output_rows = int(pairs.shape[0])
    return ThetaRun(pairs, stats)


def _hash(idx: IntArray) -> IntArray:
    """A row's spread hash for heavy values (Spark hashes the whole row instead)."""
    return (idx * 2_654_435_761) % (1 << 31)
