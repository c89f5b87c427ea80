"""Which periods no controller reading the past could have met: the history-maximum check.

A causal controller sets the retention from the pairs it has seen complete. The most generous
one that trusts only what it has seen keeps, from every arrival on, the largest requirement
(:func:`requirements`) any completed pair has shown so far, and never lowers it. When even that
controller misses a period, the period needed a lateness the stream had never shown before it:
a controller reading the past could only have met it by buffering more than anything it had
seen justified, which is a guess, not an estimate.

Such a period gets an *infeasible* verdict with its evidence: the least constant retention that
meets the target in that period alone (hindsight's need), the largest requirement seen before
the period began, and the recall the history-maximum controller reached there. Everything else a
controller missed is its own fault.

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

from outoforder.core.joins.metrics import period_of, period_recall
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
    seen_before_us: int  # the largest requirement of any pair completed before the period began
    history_max_recall: float  # the period's recall under the history-maximum controller
    feasible: bool

    def reason(self) -> str:
        """The evidence in words (empty when the period was feasible)."""
        if self.feasible:
            return ""
        return (
            f"needed a retention of {self.needed_us / 1e6:.3g} s; the most any pair had needed before "
            f"was {self.seen_before_us / 1e6:.3g} s; keeping the most seen so far reached recall "
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


def history_max_retention(inp: JoinInput, query: JoinQuery, truth: PairArray) -> IntArray:
    """The retention in force at each arrival: the largest requirement of the pairs completed before it."""
    return _largest_before(len(inp), truth, requirements(inp, query, truth)[0])


def _largest_before(n: int, truth: PairArray, req: IntArray) -> IntArray:
    per_arrival = np.zeros(n, dtype=np.int64)
    np.maximum.at(per_arrival, truth.max(axis=1), req)
    return np.concatenate([[0], np.maximum.accumulate(per_arrival)[:-1]]).astype(np.int64)


def period_verdicts(
    inp: JoinInput, query: JoinQuery, truth: PairArray | None, period_us: int, q_user: float
) -> list[PeriodVerdict]:
    """A verdict for every period with true pairs (periods as in :mod:`~outoforder.core.joins.metrics`)."""
    pairs = exact_join(inp, query) if truth is None else truth
    if pairs.shape[0] == 0:
        return []
    req, known_at = requirements(inp, query, pairs)
    d = _largest_before(len(inp), pairs, req)
    run = qjoin_set(inp, query, d, d, truth=pairs)
    quality = period_recall(inp, pairs, run.pairs, period_us, q_user)
    period = period_of(inp, pairs, int(inp.ts.min()), period_us)
    out = []
    for p in quality:
        mine = np.sort(req[period == p.period])
        need = int(mine[max(0, int(np.ceil(q_user * mine.size - 1e-9)) - 1)])
        before = req[known_at < p.start_us]
        seen = int(before.max()) if before.size else 0
        out.append(PeriodVerdict(p.period, p.start_us, need, seen, p.recall, p.met or need <= seen))
    return out
