"""A sort-based θ-join of two value arrays: cost proportional to input plus output, not |R|·|S|.

FastThetaJoin's partition pairs used to be joined by testing θ on every pair of rows (a partial
Cartesian product). Here S is sorted once, and for every R value the run of S values that can
satisfy θ is found by binary search: ``<``, ``<=``, ``>``, ``>=`` and ``=`` select a run exactly;
a band ``|a − b| <= c`` selects ``[a − c, a + c]``, widened by a few units in the last place,
because ``|a − b|`` is rounded where ``a − c`` is rounded differently. Every candidate pair of a
run is then tested with θ itself (the same IEEE expression as Spark's and the oracle's), so the
result is exact and a test is spent only on pairs that match or sit within rounding of the edge.
This is the set-at-a-time equivalent of a merge join's sweep (DuckDB's and Polars' IEJoin solve
the same problem for two predicates at once).

``tested`` counts those θ tests: for a band join it is the output plus the few rounding
candidates, never the product of the sides.

>>> import numpy as np
>>> from outoforder.core.theta.plan import Theta
>>> r, s = np.array([1.0, 5.0, 9.0]), np.array([6.0, 2.0, 8.5])
>>> got = sorted_join(r, s, Theta.parse("band:1.0"))
>>> got.r.tolist(), got.s.tolist(), got.tested
([0, 1, 2], [1, 0, 2], 3)
>>> sorted_join(r, s, Theta.parse("<")).s.tolist()  # 1 < 2, 6, 8.5 and 5 < 6, 8.5
[1, 0, 2, 0, 2]
>>> [len(c.r) for c in sorted_join_chunks(r, s, Theta.parse("<"), max_candidates=2)]
[3, 2]
>>> chain_join([r, s, np.array([7.0, np.nan])], [Theta.parse("band:1.0"), Theta.parse("<")]).rows.tolist()
[[0, 1, 0], [1, 0, 0]]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from outoforder.core.theta.plan import FloatArray, IntArray, Theta
from outoforder.errors import ConfigError

# a band's search bounds are widened by this many units of the operands' magnitude: |a − b| and
# a − c are each rounded once, so two ulps cover them; four leave room for the widening's own rounding
_WIDEN = 4 * np.finfo(np.float64).eps


@dataclass(frozen=True)
class Matches:
    """Index pairs ``(r[k], s[k])`` that satisfy θ, and how many pairs were tested to find them."""

    r: IntArray
    s: IntArray
    tested: int


def candidate_runs(r: FloatArray, s_sorted: FloatArray, theta: Theta) -> tuple[IntArray, IntArray]:
    """Per R value, the run ``[lo, hi)`` of the sorted S values that can satisfy θ.

    Exact for the comparisons and ``=``; for a band, a superset by a few rounding candidates.
    No value may be NaN (they never match and are dropped before).
    """
    m = s_sorted.size
    ss = np.searchsorted
    if theta.op == "<":
        return ss(s_sorted, r, "right"), np.full(r.size, m)
    if theta.op == "<=":
        return ss(s_sorted, r, "left"), np.full(r.size, m)
    if theta.op == ">":
        return np.zeros(r.size, dtype=np.int64), ss(s_sorted, r, "left")
    if theta.op == ">=":
        return np.zeros(r.size, dtype=np.int64), ss(s_sorted, r, "right")
    if theta.op == "=":
        return ss(s_sorted, r, "left"), ss(s_sorted, r, "right")
    c = theta.band
    with np.errstate(over="ignore", invalid="ignore"):
        slack = (np.abs(r) + c) * _WIDEN
        low, high = r - c - slack, r + c + slack
    # an infinite value is within no finite band of anything (|±inf − b| is inf, or NaN for
    # b = ±inf): its run is empty. An infinite band (or an overflowing bound) is searched over all
    # of S: rare, and the θ test then decides
    never = np.isinf(r) & bool(np.isfinite(c))
    whole = ~(np.isfinite(low) & np.isfinite(high)) & ~never
    lo = np.where(whole | never, 0, ss(s_sorted, np.where(whole | never, 0.0, low), "left"))
    hi = np.where(whole, m, np.where(never, 0, ss(s_sorted, np.where(whole | never, 0.0, high), "right")))
    return lo.astype(np.int64), hi.astype(np.int64)


def sorted_join(r: FloatArray, s: FloatArray, theta: Theta) -> Matches:
    """Every ``(i, j)`` with ``r[i] θ s[j]``, grouped by ``i`` in order (no NaN allowed)."""
    for chunk in sorted_join_chunks(r, s, theta, max_candidates=None):
        return chunk  # one chunk when unbounded
    empty = np.zeros(0, dtype=np.int64)
    return Matches(empty, empty.copy(), 0)


def sorted_join_chunks(
    r: FloatArray, s: FloatArray, theta: Theta, max_candidates: int | None = 1 << 22
) -> Iterator[Matches]:
    """:func:`sorted_join` in pieces of at most ``max_candidates`` tested pairs.

    One R row's run may exceed the bound (a row is never split); memory stays bounded otherwise.
    """
    r = np.asarray(r, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    order = np.argsort(s, kind="stable")
    s_sorted = s[order]
    lo, hi = candidate_runs(r, s_sorted, theta)
    counts = np.maximum(hi - lo, 0)
    ends = np.cumsum(counts)
    start = 0
    while start < r.size:
        if max_candidates is None:
            stop = r.size
        else:
            base = ends[start - 1] if start else 0
            stop = max(int(np.searchsorted(ends, base + max_candidates, "right")), start + 1)
        yield _matches(r, s, order, lo[start:stop], counts[start:stop], start, theta)
        start = stop


def _matches(
    r: FloatArray, s: FloatArray, order: IntArray, lo: IntArray, counts: IntArray, first: int, theta: Theta
) -> Matches:
    """Expand the runs of R rows ``first …`` into candidate pairs and keep those satisfying θ."""
    total = int(counts.sum())
    ri = np.repeat(np.arange(first, first + counts.size, dtype=np.int64), counts)
    if total == 0:
        return Matches(ri, ri.copy(), 0)
    # position of each candidate in sorted S: its run's start plus its offset within the run
    run_start = np.cumsum(counts) - counts
    offset = np.arange(total, dtype=np.int64) - np.repeat(run_start, counts)
    si = order[np.repeat(lo, counts) + offset]
    ok: npt.NDArray[np.bool_] = theta.holds(r[ri], s[si])
    return Matches(ri[ok], si[ok], total)


@dataclass(frozen=True)
class Chain:
    """Results of a chained join: row ``k`` of ``rows`` holds one row index per input."""

    rows: IntArray  # (results, inputs)
    tested: int


def chain_join(values: list[FloatArray], thetas: list[Theta]) -> Chain:
    """Every ``(i0, i1, …)`` with ``values[0][i0] θ0 values[1][i1] θ1 values[2][i2] …``.

    Left to right, one :func:`sorted_join` per link: the partial results' last values against the
    next input. NaN values never match. ``tested`` adds up the links' θ tests.
    """
    if len(values) != len(thetas) + 1 or not thetas:
        msg = f"a chain of n >= 2 inputs needs n - 1 predicates, got {len(values)} and {len(thetas)}"
        raise ConfigError(msg)
    vals = [np.asarray(v, dtype=np.float64) for v in values]
    valid = [np.nonzero(~np.isnan(v))[0] for v in vals]
    cols, tested = [valid[0]], 0
    for k, theta in enumerate(thetas):
        m = sorted_join(vals[k][cols[-1]], vals[k + 1][valid[k + 1]], theta)
        cols = [c[m.r] for c in cols] + [valid[k + 1][m.s]]
        tested += m.tested
    return Chain(np.stack(cols, axis=1).astype(np.int64), tested)
