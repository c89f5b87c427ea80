"""FastThetaJoin's plan for ``R.a θ S.b`` (Hu 2020; docs/theta.md), and the brute-force oracle.

The plan, on the join attribute of the two windowed datasets:

1. min and max per side, and a cross filter: for ``R.a > S.b`` no R row ``<= min(S)`` and no S
   row ``>= max(R)`` can match (:meth:`Theta.cross_bounds` has the rule for every operator);
2. both sides are range-partitioned on the same cuts (:func:`choose_cuts`): the seed's equal-width
   partitions of the filtered range, or equi-depth ones (quantiles) where equal widths would put
   most rows into few partitions; a single value heavier than a partition is spread over several
   by a hash (the seed's skew split, ``flag = ⌈ActualSize / MaxSize⌉`` units);
3. partition pairs are classified from their value ranges: *none* (no pair of rows can satisfy θ:
   never joined), *full* (every pair does: emitted without a test) or *partial*;
4. a partial pair is joined by sorting (:mod:`outoforder.core.theta.sortjoin`), at a cost in
   proportion to its input and output, where the seed compared every pair of its rows.

Operators: ``<``, ``<=``, ``>=``, ``>``, and as extensions ``=`` and ``band:c`` (``|a − b| <= c``).
Null (NaN) values never match; they are excluded and counted. The plan run set at a time in numpy
is :func:`outoforder.core.theta.fast.fast_theta_join`, the reference of the Spark operator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

    def matching_ranges(
        self, r_lo: float, r_hi: float, s_lo: float, s_hi: float
    ) -> tuple[tuple[float, float], tuple[float, float]]:
        """The cross filter's ranges within each side's own ``[lo, hi]`` (empty when lo > hi).

        >>> Theta(">").matching_ranges(0.0, 10.0, 5.0, 20.0)
        ((5.000000000000001, 10.0), (5.0, 9.999999999999998))
        """
        (rb_lo, rb_hi), (sb_lo, sb_hi) = self.cross_bounds(r_lo, r_hi, s_lo, s_hi)
        return (max(r_lo, rb_lo), min(r_hi, rb_hi)), (max(s_lo, sb_lo), min(s_hi, sb_hi))

    def cross_bounds(
        self, r_lo: float, r_hi: float, s_lo: float, s_hi: float
    ) -> tuple[tuple[float, float], tuple[float, float]]:
        """The cross filter from the two sides' min and max: the closed ranges of R and S that can match."""
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


PARTITION_CAP = 256  # range partitions at most: the Spark plan assigns them with a tree of comparisons
SAMPLE_PER_PARTITION = 4  # quantile points per partition, to see skew and heavy values
SKEWED = 2.0  # an equal-width partition expected to hold more than this many times its share
# A partition pair is joined by one task in memory, at a cost in proportion to its rows: fewer,
# larger partitions cost less than many small ones (each pair, and each Spark job, has a fixed
# cost of a tenth of a second or more on a small machine; docs/benchmarks/theta.md), down to these.
ROWS_PER_PARTITION = 200_000  # rows of both sides
OUTPUT_PER_ROW = 16  # a full pair of an inequality join may output this many rows per input row


def partitions_for(
    theta: Theta, n_r: int, n_s: int, most: int, rows_per_partition: int = ROWS_PER_PARTITION
) -> int:
    """Range partitions for ``n_r`` and ``n_s`` rows: enough to bound a task, at most ``most``.

    A band or ``=`` join's pairs hold about their partitions' rows; an inequality's full pairs
    hold ``(n_r/P)·(n_s/P)`` output rows, so there P grows with the square root of the output
    (up to ``OUTPUT_PER_ROW × rows_per_partition`` output rows per pair).

    >>> band, less = Theta("band", 0.1), Theta("<")
    >>> partitions_for(band, 100_000, 100_000, 128), partitions_for(less, 20_000, 20_000, 128)
    (1, 12)
    >>> partitions_for(Theta("band", 0.1), 10_000_000, 10_000_000, 64)
    64
    """
    want = math.ceil((n_r + n_s) / rows_per_partition)
    if theta.op in ("<", "<=", ">", ">="):
        want = max(want, math.ceil(math.sqrt(n_r * n_s / (OUTPUT_PER_ROW * rows_per_partition))))
    return max(1, min(want, most, PARTITION_CAP))


def merge_samples(samples: list[tuple[FloatArray, int]], points: int) -> FloatArray:
    """Evenly spaced quantiles of a union, from each part's evenly spaced quantiles and its rows.

    Each sample point stands for ``rows / len(sample)`` rows of its part.

    >>> merge_samples([(np.array([1.0, 2.0]), 2), (np.array([10.0, 20.0, 30.0, 40.0]), 400)], 4).tolist()
    [10.0, 20.0, 30.0, 40.0]
    """
    parts = [(np.asarray(x, dtype=np.float64), n) for x, n in samples if len(x) and n > 0]
    if not parts:
        return np.zeros(0)
    vals = np.concatenate([x for x, _ in parts])
    weights = np.concatenate([np.full(x.size, n / x.size) for x, n in parts])
    order = np.argsort(vals, kind="stable")
    vals, cum = vals[order], np.cumsum(weights[order])
    at = (np.arange(points) + 0.5) * cum[-1] / points
    return np.asarray(vals[np.minimum(np.searchsorted(cum, at, "left"), vals.size - 1)])


@dataclass(frozen=True)
class ValueSummary:
    """One side's join values in brief: valid rows, null/NaN rows, min, max, evenly spaced quantiles.

    Built per batch of rows where the rows are (:meth:`of`) and merged (:meth:`merge`): the plan
    needs nothing else, so no value has to travel to one place. The quantiles of a merge are those
    of the weighted union (:func:`merge_samples`), approximate once merged; they only balance the
    partitions, results never depend on them.

    >>> a = ValueSummary.of(np.array([3.0, np.nan, 1.0, 2.0]), 2)
    >>> a.n, a.nulls, a.lo, a.hi, a.sample.tolist()
    (3, 1, 1.0, 3.0, [1.0, 3.0])
    >>> m = ValueSummary.merge([a, ValueSummary.of(np.array([10.0, 20.0, 30.0]), 3)], 3)
    >>> m.n, m.nulls, m.lo, m.hi, m.sample.tolist()
    (6, 1, 1.0, 30.0, [1.0, 3.0, 20.0])
    """

    n: int
    nulls: int
    lo: float
    hi: float
    sample: FloatArray

    @classmethod
    def of(cls, values: FloatArray, points: int) -> ValueSummary:
        """The summary of ``values`` with at most ``points`` quantiles (the midpoints of equal ranks)."""
        v = np.asarray(values, dtype=np.float64)
        valid = np.sort(v[~np.isnan(v)])
        nulls = int(v.size - valid.size)
        if valid.size == 0:
            return cls(0, nulls, math.nan, math.nan, np.zeros(0))
        k = min(points, valid.size)
        at = ((np.arange(k) + 0.5) * valid.size / k).astype(np.int64)
        return cls(int(valid.size), nulls, float(valid[0]), float(valid[-1]), valid[at])

    @classmethod
    def merge(cls, parts: list[ValueSummary], points: int) -> ValueSummary:
        """One summary of the union of ``parts`` (at most ``points`` quantiles)."""
        nulls = sum(p.nulls for p in parts)
        full = [p for p in parts if p.n > 0]
        if not full:
            return cls(0, nulls, math.nan, math.nan, np.zeros(0))
        n = sum(p.n for p in full)
        sample = merge_samples([(p.sample, p.n) for p in full], min(points, n))
        return cls(n, nulls, min(p.lo for p in full), max(p.hi for p in full), sample)


@dataclass(frozen=True)
class Cuts:
    """Range partitions of the join values: partition ``p`` holds ``[cuts[p-1], cuts[p])``.

    ``kind`` is ``range`` (the seed's equal-width partitions), ``quantile`` (equi-depth: chosen
    when equal widths would crowd rows into few partitions) or ``single``. A value that fills
    more than one quantile step appears in ``values`` several times, ``k`` in a row from index
    ``i``: its rows are spread by a hash over partitions ``i+1 … i+k`` (the seed's skew split of
    an oversized partition, which equal values cannot otherwise get).

    >>> cuts = Cuts((1.0, 5.0, 5.0, 5.0, 9.0), "quantile")
    >>> cuts.partitions, cuts.heavy()
    (6, [(5.0, 2, 3)])
    >>> cuts.assign(np.array([0.0, 1.0, 5.0, 5.0, 5.0, 7.0, 9.5]), np.array([0, 0, 0, 1, 2, 0, 0])).tolist()
    [0, 1, 2, 3, 4, 4, 5]
    >>> cuts.ranges(0.0, 10.0)[1:5]
    [(1.0, 4.999999999999999), (5.0, 5.0), (5.0, 5.0), (5.0, 8.999999999999998)]
    """

    values: tuple[float, ...]
    kind: str

    @property
    def partitions(self) -> int:
        """Number of range partitions."""
        return len(self.values) + 1

    def heavy(self) -> list[tuple[float, int, int]]:
        """``(value, first partition, partitions)`` of every value spread over several partitions."""
        out, k = [], 0
        while k < len(self.values):
            j = k
            while j + 1 < len(self.values) and self.values[j + 1] == self.values[k]:
                j += 1
            if j > k:
                out.append((self.values[k], k + 1, j - k + 1))
            k = j + 1
        return out

    def assign(self, v: FloatArray, h: IntArray) -> IntArray:
        """Partition of every value (``h``: a non-negative hash of its row, for heavy values)."""
        p = np.searchsorted(np.array(self.values, dtype=np.float64), v, "right").astype(np.int64)
        for value, first, k in self.heavy():
            at = v == value
            p[at] = first + h[at] % k
        return p

    def ranges(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """Each partition's closed value range within ``[lo, hi]`` (empty when lo > hi).

        A partition ends just below its upper cut (the cut's value goes to the next one), so
        that neighbouring partitions do not overlap: under ``<`` the pair of a partition and the
        next one is full, not partial. A partition of a heavy value holds that value only.
        """
        bounds = [lo, *self.values, hi]
        out = []
        for p in range(self.partitions):
            top = bounds[p + 1]
            if p < self.partitions - 1 and bounds[p] != top:  # not the last, nor a heavy value's
                top = math.nextafter(top, -math.inf)
            out.append((max(bounds[p], lo), min(top, hi)))
        return out


def choose_cuts(sample: FloatArray, lo: float, hi: float, partitions: int) -> Cuts:
    """The seed's equal-width partitions of ``[lo, hi]``, or quantile ones where values are skewed.

    ``sample`` holds evenly spaced quantiles of both sides' join values (exact or approximate);
    those outside ``[lo, hi]`` (removed by the cross filter) are ignored. Equal widths are kept
    unless one partition would hold more than :data:`SKEWED` times its share of the sample.

    >>> choose_cuts(np.linspace(0, 1, 33), 0.0, 1.0, 4)
    Cuts(values=(0.25, 0.5, 0.75), kind='range')
    >>> choose_cuts(np.array([1.0] * 30 + [2.0, 3.0]), 1.0, 3.0, 4)  # one value holds 94 %
    Cuts(values=(1.0, 1.0, 1.0), kind='quantile')
    """
    if partitions < 1:
        msg = f"need at least one partition, got {partitions}"
        raise ConfigError(msg)
    partitions = min(partitions, PARTITION_CAP)
    inside = np.sort(sample[(sample >= lo) & (sample <= hi)])
    with np.errstate(over="ignore", invalid="ignore"):
        span = (hi - lo) / partitions
    if partitions == 1 or not hi > lo:
        return Cuts((), "single")
    if math.isfinite(span) and span > 0:
        even = tuple(float(lo + k * span) for k in range(1, partitions))
        share = np.bincount(np.searchsorted(np.array(even), inside, "right"), minlength=partitions)
        if inside.size < partitions or share.max() <= SKEWED * inside.size / partitions:
            return Cuts(even, "range")
    if inside.size == 0:
        return Cuts((), "single")
    at = [min(round(k * inside.size / partitions), inside.size - 1) for k in range(1, partitions)]
    return Cuts(tuple(float(inside[i]) for i in at), "quantile")


@dataclass(frozen=True)
class Unit:
    """One range partition of one side: its closed value range."""

    pid: int
    lo: float
    hi: float


@dataclass(frozen=True)
class PairPlan:
    """Partition pairs to join: indices into the R and S unit lists, and whether θ holds for all."""

    r_units: list[Unit]
    s_units: list[Unit]
    pairs: list[tuple[int, int, bool]]  # (R unit, S unit, full)


def plan_pairs(r_units: list[Unit], s_units: list[Unit], theta: Theta) -> PairPlan:
    """Classify every unit pair from the units' value ranges; keep those that can satisfy θ."""
    pairs = []
    for a, ru in enumerate(r_units):
        for b, su in enumerate(s_units):
            kind = theta.classify(ru.lo, ru.hi, su.lo, su.hi)
            if kind != "none":
                pairs.append((a, b, kind == "full"))
    return PairPlan(r_units, s_units, pairs)


def side_units(cuts: Cuts, lo: float, hi: float) -> list[Unit]:
    """One side's units: the partitions whose range meets the side's filtered range ``[lo, hi]``."""
    return [Unit(p, a, b) for p, (a, b) in enumerate(cuts.ranges(lo, hi)) if a <= b]


@dataclass
class JoinStats:
    """Counters of one θ-join run (the benchmark's cost measures).

    ``r_filtered``/``s_filtered`` are None where a method does not count them (FastThetaJoin on
    Spark drops those rows while routing, in the same pass as the join).
    """

    rows_compared: int = 0  # θ tests on pairs of rows
    partition_pairs: int = 0  # pairs joined (full + partial)
    full_pairs: int = 0
    output_rows: int = 0
    r_filtered: int | None = 0  # rows dropped by the cross filter
    s_filtered: int | None = 0
    null_rows: int = 0  # NaN join values, excluded
    replicated_rows: int = 0  # rows sent to partition-pair tasks (a row once per pair it is in)
    partitions: int = 0  # range partitions used (FastThetaJoin)
    partitioning: str = ""  # range, quantile or single (FastThetaJoin)


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
