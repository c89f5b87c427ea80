"""FastThetaJoin's plan for ``R.a θ S.b`` (Hu 2020; docs/theta.md), and the brute-force oracle.

The plan, on the join attribute of the two windowed datasets:

1. min and max per side; ``span = (global max − global min) / partitions``; both sides are
   range-partitioned on the same edges (partition ``p`` holds ``[lo + p·span, lo + (p+1)·span)``,
   the last one closed);
2. a coarse cross filter: for ``R.a > S.b`` no R row ``<= min(S)`` and no S row ``>= max(R)`` can
   match (and likewise for the other operators); whole partitions outside the bound are dropped by
   index, only the partition holding the bound is scanned row by row;
3. partition pairs are classified from the partitions' actual min and max: *none* (no pair can
   satisfy θ: never joined), *full* (every pair satisfies θ: emitted without a per-row test) or
   *partial* (Cartesian product with the θ test);
4. skew: with ``MaxSize = ⌈window size / partitions⌉`` a partition of ``ActualSize`` rows gets
   ``flag = ⌈ActualSize / MaxSize⌉`` and is split into ``flag`` near-equal sub-partitions (700 rows,
   MaxSize 300 → 233, 233, 234), so no task gets a giant Cartesian product.

Operators: ``<``, ``<=``, ``>=``, ``>``, and as extensions ``=`` and ``band:c`` (``|a − b| <= c``).
Null (NaN) values never match; they are excluded and counted.

>>> import numpy as np
>>> r, s = np.array([1.0, 5.0, 9.0]), np.array([2.0, 6.0])
>>> run = fast_theta_join(r, s, Theta.parse(">"), partitions=2)
>>> run.pairs.tolist(), run.stats.output_rows
([[1, 0], [2, 0], [2, 1]], 3)
>>> skew_split(700, window_size=1_000, partitions=4)  # MaxSize 250 -> flag 3
[233, 233, 234]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from outoforder.core.theta.predicate import parse_predicate
from outoforder.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
PairArray = npt.NDArray[np.int64]  # (n, 2): R index, S index


@dataclass(frozen=True)
class Theta:
    """A θ predicate ``R.a op S.b`` (``band`` = ``|a − b| <= c``)."""

    op: str
    band: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Theta:
        """``<``, ``<=``, ``>=``, ``>``, ``=`` or ``band:c`` (:mod:`outoforder.core.theta.predicate`).

        >>> Theta.parse("band:2.5")
        Theta(op='band', band=2.5)
        """
        op, band = parse_predicate(text)
        return cls(op, band)

    def holds(self, a: FloatArray, b: FloatArray) -> npt.NDArray[np.bool_]:
        """Elementwise ``a θ b`` (False where either is NaN)."""
        with np.errstate(invalid="ignore", over="ignore"):  # ±inf and ±1e308 are valid input
            if self.op == "<":
                return np.asarray(a < b)
            if self.op == "<=":
                return np.asarray(a <= b)
            if self.op == ">=":
                return np.asarray(a >= b)
            if self.op == ">":
                return np.asarray(a > b)
            if self.op == "=":
                return np.asarray(a == b)
            return np.asarray(np.abs(a - b) <= self.band)

    def classify(self, r_lo: float, r_hi: float, s_lo: float, s_hi: float) -> str:
        """``none``, ``full`` or ``partial`` for R values in [r_lo, r_hi] and S values in [s_lo, s_hi]."""
        op, c = self.op, self.band
        if op == ">":
            none, full = r_hi <= s_lo, r_lo > s_hi
        elif op == ">=":
            none, full = r_hi < s_lo, r_lo >= s_hi
        elif op == "<":
            none, full = r_lo >= s_hi, r_hi < s_lo
        elif op == "<=":
            none, full = r_lo > s_hi, r_hi <= s_lo
        elif op == "=":
            none, full = r_hi < s_lo or r_lo > s_hi, r_lo == r_hi == s_lo == s_hi
        else:
            none = r_lo - s_hi > c or s_lo - r_hi > c
            full = max(abs(r_hi - s_lo), abs(s_hi - r_lo)) <= c
        return "none" if none else "full" if full else "partial"

    def bounds(self, r: FloatArray, s: FloatArray) -> tuple[tuple[float, float], tuple[float, float]]:
        """The cross filter: the closed value ranges of R and of S that can still match."""
        return self.cross_bounds(float(r.min()), float(r.max()), float(s.min()), float(s.max()))

    def cross_bounds(
        self, r_lo: float, r_hi: float, s_lo: float, s_hi: float
    ) -> tuple[tuple[float, float], tuple[float, float]]:
        """:meth:`bounds` from the two sides' min and max only (all a distributed engine collects)."""
        op, c = self.op, self.band
        nxt = math.nextafter
        if op == ">":  # r > s_min, s < r_max
            return (nxt(s_lo, math.inf), r_hi), (s_lo, nxt(r_hi, -math.inf))
        if op == ">=":
            return (s_lo, r_hi), (s_lo, r_hi)
        if op == "<":
            return (r_lo, nxt(s_hi, -math.inf)), (nxt(r_lo, math.inf), s_hi)
        if op == "<=":
            return (r_lo, s_hi), (r_lo, s_hi)
        if op == "=":
            lo, hi = max(r_lo, s_lo), min(r_hi, s_hi)
            return (lo, hi), (lo, hi)
        return (s_lo - c, s_hi + c), (r_lo - c, r_hi + c)


@dataclass(frozen=True)
class Unit:
    """One (sub-)partition of a side: the rows of range partition ``pid`` in hash ``slots``.

    ``slots`` is empty for a partition that was not split (all its rows); a skewed partition is
    split into units that each own a set of hash slots of its rows.
    """

    pid: int
    sub: int
    count: int
    lo: float
    hi: float
    slots: tuple[int, ...] = ()


@dataclass(frozen=True)
class PairPlan:
    """Partition pairs to join: indices into the R and S unit lists, and whether θ holds for all."""

    r_units: list[Unit]
    s_units: list[Unit]
    pairs: list[tuple[int, int, bool]]  # (R unit, S unit, full)

    @property
    def rows_compared(self) -> int:
        """Per-row θ tests the plan needs: the Cartesian products of the partial pairs."""
        return sum(self.r_units[a].count * self.s_units[b].count for a, b, full in self.pairs if not full)

    @property
    def replicated_rows(self) -> int:
        """Rows sent to the pair tasks: each unit once per pair it is in."""
        return sum(self.r_units[a].count + self.s_units[b].count for a, b, _ in self.pairs)


def plan_pairs(r_units: list[Unit], s_units: list[Unit], theta: Theta) -> PairPlan:
    """Classify every unit pair from the units' min and max; keep those that can satisfy θ."""
    pairs = []
    for a, ru in enumerate(r_units):
        for b, su in enumerate(s_units):
            kind = theta.classify(ru.lo, ru.hi, su.lo, su.hi)
            if kind != "none":
                pairs.append((a, b, kind == "full"))
    return PairPlan(r_units, s_units, pairs)


FINE = 8  # value sub-ranges per range partition, for value-ordered skew splits
HASH = 8  # hash slots per sub-range, to split runs of equal values
SLOTS = FINE * HASH  # slot = fine sub-range · HASH + hash slot


def units_from_slots(
    rows: list[tuple[int, int, int, float, float]], window_size: int, partitions: int
) -> list[Unit]:
    """A side's units from its per (partition, slot) ``(pid, slot, count, min, max)`` rows.

    ``slot = fine · HASH + h``: ``fine`` is the row's sub-range of its partition (FINE equal
    ones), ``h`` a hash of the row. A partition over MaxSize gets ``flag`` units
    (:func:`skew_split`'s flag): its slots, in slot order (by value first), are cut into ``flag``
    consecutive runs of near-equal counts. The units are ordered by value, so few of their pairs
    need a per-row test; equal values, which share a sub-range, are still split by hash. A
    partition is never cut finer than its non-empty slots, and rows identical in every column
    share a slot.

    >>> rows = [(0, s, 100, float(s // 8), float(s // 8)) for s in range(64)]  # 6,400 rows
    >>> [(u.count, u.lo, u.hi) for u in units_from_slots(rows, 6_400, 2)]  # MaxSize 3,200
    [(3200, 0.0, 3.0), (3200, 4.0, 7.0)]
    """
    by_pid: dict[int, list[tuple[int, int, float, float]]] = {}
    for pid, slot, count, lo, hi in rows:
        by_pid.setdefault(pid, []).append((slot, count, lo, hi))
    units: list[Unit] = []
    for pid in sorted(by_pid):
        slots = sorted(by_pid[pid])
        total = sum(t[1] for t in slots)
        flag = min(len(skew_split(total, window_size, partitions)), len(slots))
        if flag == 1:
            units.append(Unit(pid, 0, total, min(t[2] for t in slots), max(t[3] for t in slots)))
            continue
        groups: list[list[tuple[int, int, float, float]]] = [[]]
        seen = 0
        for k, t in enumerate(slots):
            left = len(slots) - k  # every remaining group needs at least one slot
            if groups[-1] and (seen >= total * len(groups) / flag or left <= flag - len(groups)):
                groups.append([])
            groups[-1].append(t)
            seen += t[1]
        for sub, g in enumerate(groups):
            lo, hi = min(x[2] for x in g), max(x[3] for x in g)
            units.append(Unit(pid, sub, sum(x[1] for x in g), lo, hi, tuple(x[0] for x in g)))
    return units


@dataclass
class JoinStats:
    """Counters of one θ-join run (the benchmark's cost measures)."""

    rows_compared: int = 0  # per-row θ tests (partial partition pairs)
    partition_pairs: int = 0  # pairs joined (full + partial)
    full_pairs: int = 0
    output_rows: int = 0
    r_filtered: int = 0  # rows dropped by the cross filter
    s_filtered: int = 0
    null_rows: int = 0  # NaN join values, excluded
    replicated_rows: int = 0  # rows sent to partition-pair tasks (a row once per pair it is in)
    sub_partitions: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ThetaRun:
    """The result pairs (sorted) and the counters."""

    pairs: PairArray
    stats: JoinStats


def brute_force(r: FloatArray, s: FloatArray, theta: Theta) -> PairArray:
    """Every (i, j) with ``r[i] θ s[j]``, sorted: the oracle."""
    r = np.asarray(r, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    ok = theta.holds(r[:, None], s[None, :])
    i, j = np.nonzero(ok)
    return np.stack([i, j], axis=1).astype(np.int64) if i.size else np.zeros((0, 2), dtype=np.int64)


def skew_split(size: int, window_size: int, partitions: int) -> list[int]:
    """Sub-partition sizes of a partition of ``size`` rows (one part when it is not oversized)."""
    max_size = max(math.ceil(window_size / max(partitions, 1)), 1)
    flag = max(math.ceil(size / max_size), 1)
    base, extra = divmod(size, flag)
    return [base + (1 if k >= flag - extra else 0) for k in range(flag)]


def one_bucket_shape(regions: int, n_r: int, n_s: int) -> tuple[int, int]:
    """1-Bucket-Theta's grid: ``rows × cols <= regions`` minimizing a region's input ``n_r/rows + n_s/cols``.

    Okcan & Riedewald (SIGMOD 2011) cover the |R|×|S| matrix with equal regions; the best shape
    for equal sides is the square.

    >>> one_bucket_shape(16, 1000, 1000), one_bucket_shape(8, 1000, 10)
    ((4, 4), (8, 1))
    """
    if regions < 1:
        msg = f"need at least one region, got {regions}"
        raise ConfigError(msg)
    best = min(
        ((rows, regions // rows) for rows in range(1, regions + 1)),
        key=lambda rc: (max(n_r, 1) / rc[0] + max(n_s, 1) / rc[1], -rc[0] * rc[1]),
    )
    return best


def range_partition(values: FloatArray, lo: float, hi: float, partitions: int) -> IntArray:
    """Partition index of every value on ``partitions`` equal ranges of [lo, hi] (last closed)."""
    if partitions < 1:
        msg = f"need at least one partition, got {partitions}"
        raise ConfigError(msg)
    with np.errstate(over="ignore", invalid="ignore"):
        span = (hi - lo) / partitions
    if not (np.isfinite(span) and span > 0):  # one value, or infinite/overflowing extremes
        return np.zeros(values.size, dtype=np.int64)
    return np.clip(np.floor((values - lo) / span), 0, partitions - 1).astype(np.int64)


def fast_theta_join(
    r: FloatArray, s: FloatArray, theta: Theta, partitions: int, window_size: int | None = None
) -> ThetaRun:
    """FastThetaJoin, set at a time in numpy: the plan of the module docstring, with counters."""
    r = np.asarray(r, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    stats = JoinStats()
    r_ok, s_ok = ~np.isnan(r), ~np.isnan(s)
    stats.null_rows = int((~r_ok).sum() + (~s_ok).sum())
    ri, si = np.nonzero(r_ok)[0], np.nonzero(s_ok)[0]
    if ri.size == 0 or si.size == 0:
        return ThetaRun(np.zeros((0, 2), dtype=np.int64), stats)
    (r_lo, r_hi), (s_lo, s_hi) = theta.bounds(r[ri], s[si])
    keep_r = (r[ri] >= r_lo) & (r[ri] <= r_hi)
    keep_s = (s[si] >= s_lo) & (s[si] <= s_hi)
    stats.r_filtered, stats.s_filtered = int((~keep_r).sum()), int((~keep_s).sum())
    ri, si = ri[keep_r], si[keep_s]
    if ri.size == 0 or si.size == 0:
        return ThetaRun(np.zeros((0, 2), dtype=np.int64), stats)
    lo = float(min(r[ri].min(), s[si].min()))
    hi = float(max(r[ri].max(), s[si].max()))
    rp, sp = range_partition(r[ri], lo, hi, partitions), range_partition(s[si], lo, hi, partitions)
    cap = window_size if window_size is not None else max(ri.size, si.size)
    r_parts = _split(ri, r, rp, partitions, cap, stats)
    s_parts = _split(si, s, sp, partitions, cap, stats)
    r_units = [Unit(0, k, a.size, float(r[a].min()), float(r[a].max())) for k, a in enumerate(r_parts)]
    s_units = [Unit(0, k, b.size, float(s[b].min()), float(s[b].max())) for k, b in enumerate(s_parts)]
    plan = plan_pairs(r_units, s_units, theta)
    stats.partition_pairs = len(plan.pairs)
    stats.full_pairs = sum(full for _, _, full in plan.pairs)
    stats.rows_compared = plan.rows_compared
    out: list[PairArray] = []
    for x, y, full in plan.pairs:
        a, b = r_parts[x], s_parts[y]
        if full:
            ii, jj = np.meshgrid(a, b, indexing="ij")
        else:
            ok = theta.holds(r[a][:, None], s[b][None, :])
            u, v = np.nonzero(ok)
            ii, jj = a[u], b[v]
        out.append(np.stack([ii.ravel(), jj.ravel()], axis=1).astype(np.int64))
    pairs = np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))] if pairs.size else pairs
    stats.output_rows = int(pairs.shape[0])
    return ThetaRun(pairs, stats)


def _split(
    idx: IntArray, values: FloatArray, part: IntArray, partitions: int, window_size: int, stats: JoinStats
) -> list[IntArray]:
    """Row indices per non-empty partition, oversized ones split by value order (skew)."""
    out: list[IntArray] = []
    for p in range(partitions):
        members = idx[part == p]
        if not members.size:
            continue
        sizes = skew_split(members.size, window_size, partitions)
        stats.sub_partitions.append(len(sizes))
        ordered = members[np.argsort(values[members], kind="stable")]
        cuts = np.cumsum(sizes)[:-1]
        out.extend(np.split(ordered, cuts))
    return out
