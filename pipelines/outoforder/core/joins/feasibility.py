"""Which periods no controller reading the past could have met: the record check.

The promise is per period, and so is its yardstick: a period's *need* is the least constant
retention that meets the target in that period alone (hindsight). A causal controller can at
best keep what the periods before it needed; the most generous one that trusts only that keeps
the largest need of any period known so far (a period is known once its last pair has
completed) and never lowers it. When even that controller misses a period, the period needed
more than any period before it had (a *record*): a controller reading the past could only have
met it by buffering more than anything it had seen justified, which is a guess, not an estimate.
Records are rare in a steady stream (the k-th period is one with chance 1/k) and are what abrupt
shifts to a worse delay regime produce.

Such a period gets an *infeasible* verdict with its evidence: its need, the largest need of any
period before it, and the recall the history-maximum controller reached there. Everything else a
controller missed is its own fault. (Judging by single pairs instead, a controller that keeps the
largest requirement any one pair ever showed, would excuse almost nothing and cost without
bound: under heavy-tailed delays one pair can need a minute where periods need a second.)

>>> from outoforder.core.joins.query import JoinInput, JoinQuery
>>> q = JoinQuery(window_us=0, predicate="key")
>>> inp = JoinInput.from_rows([  # (side, ts, x, y, key) in arrival order
...     (0, 0, 0, 0, 1), (1, 0, 0, 0, 1),  # period 0: a pair on time
...     (0, 120, 0, 0, 2), (1, 150, 0, 0, 3), (0, 190, 0, 0, 4), (1, 190, 0, 0, 5),
...     (1, 120, 0, 0, 2),  # period 1's only pair: its S tuple arrives 70 µs after T passed it
... ])
>>> [(v.period, v.needed_us, v.seen_before_us, v.feasible) for v in period_verdicts(inp, q, None, 100, 1.0)]
[(0, 0, 0, True), (1, 70, 0, False)]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.metrics import least_count, period_of, period_recall
from outoforder.core.joins.progress import joint_progress
from outoforder.core.joins.qjoin import qjoin_set
from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, exact_join

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PeriodVerdict:
    """Whether a controller reading the past could have met one period, and the evidence."""

    period: int
    start_us: int
    needed_us: int  # hindsight: the least constant retention meeting the target in this period
    seen_before_us: int  # the largest need of any period before it
    history_max_recall: float  # the period's recall under the history-maximum controller
    feasible: bool

    def reason(self) -> str:
        """The evidence in words (empty when the period was feasible)."""
        if self.feasible:
            return ""
        return (
            f"needed a retention of {self.needed_us / 1e6:.3g} s; the most any period before it "
            f"needed was {self.seen_before_us / 1e6:.3g} s; keeping that reached recall "
            f"{self.history_max_recall:.3f}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with the reason."""
        return asdict(self) | {"reason": self.reason()}


def requirements(inp: JoinInput, query: JoinQuery, truth: PairArray) -> tuple[IntArray, IntArray]:
    """Per true pair: the retention it requires, and the progress T when it became known.

    The earlier-arriving tuple must still be buffered when the later one arrives:
    ``T(later) - w - earlier.ts`` (at least 0).
    """
    t = joint_progress(inp)
    earlier, later = truth.min(axis=1), truth.max(axis=1)
    req = np.maximum(t[later] - query.window_us - inp.ts[earlier], 0).astype(np.int64)
    return req, t[later].astype(np.int64)


def period_needs(req: IntArray, period: IntArray, q_user: float) -> dict[int, int]:
    """Per period with pairs: the least retention covering a ``q_user`` share of its pairs.

    >>> period_needs(np.array([0, 5, 9, 2, 40]), np.array([0, 0, 0, 1, 1]), 0.6)
    {0: 5, 1: 40}
    """
    order = np.lexsort((req, period))
    ps, rs = period[order], req[order]
    starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]]) if ps.size else np.zeros(0, np.int64)
    out = {}
    for start, n in zip(starts, np.diff(np.r_[starts, ps.size]), strict=True):
        c = least_count(int(n), q_user)
        out[int(ps[start])] = int(rs[start + c - 1]) if c else 0
    return out


def least_constant(req: IntArray, period: IntArray, q_user: float, skip_periods: int = 0) -> int:
    """Hindsight over a whole sequence: the least constant meeting ``q_user`` in every period with pairs.

    ``req`` is what each true pair requires of the constant (a retention, :func:`requirements`, or
    a K-slack's K); the first ``skip_periods`` periods with pairs are not judged (the warm-up).

    >>> least_constant(np.array([0, 5, 9, 2, 40]), np.array([0, 0, 0, 1, 1]), 0.6, skip_periods=1)
    40
    """
    needs = sorted(period_needs(req, period, q_user).items())[skip_periods:]
    return max((need for _, need in needs), default=0)


def history_max_retention(n: int, truth: PairArray, period: IntArray, needs: dict[int, int]) -> IntArray:
    """The retention in force at each of ``n`` arrivals: the largest need of the periods known by then.

    A period's need is known once its last pair has completed (its later tuple arrived).
    """
    later = truth.max(axis=1)
    per_arrival = np.zeros(n, dtype=np.int64)
    for p, need in needs.items():
        per_arrival[int(later[period == p].max())] = max(per_arrival[int(later[period == p].max())], need)
    return np.concatenate([[0], np.maximum.accumulate(per_arrival)[:-1]]).astype(np.int64)


def period_verdicts(
    inp: JoinInput, query: JoinQuery, truth: PairArray | None, period_us: int, q_user: float
) -> list[PeriodVerdict]:
    """A verdict for every period with true pairs (periods as in :mod:`~outoforder.core.joins.metrics`)."""
    pairs = exact_join(inp, query) if truth is None else truth
    if pairs.shape[0] == 0:
        return []
    origin = int(inp.ts.min())
    req, _ = requirements(inp, query, pairs)
    period = period_of(inp, pairs, origin, period_us)
    needs = period_needs(req, period, q_user)
    d = history_max_retention(len(inp), pairs, period, needs)
    run = qjoin_set(inp, query, d, d, truth=pairs)
    out = []
    for p in period_recall(inp, pairs, run.pairs, period_us, q_user):
        seen = max((n for k, n in needs.items() if k < p.period), default=0)
        need = needs[p.period]
        out.append(PeriodVerdict(p.period, p.start_us, need, seen, p.recall, p.met or need <= seen))
    return out
