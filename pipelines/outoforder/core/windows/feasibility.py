"""Which windows no controller reading the past could have met: the record check for aggregates.

The windows' counterpart of :mod:`outoforder.core.joins.feasibility`. A window's *need* is the
least constant buffer K from which on its emitted result is within ε of the exact one
(:mod:`outoforder.core.windows.lateness`), found from its members' lateness alone. A controller
reading the past can at best wait what the windows before it needed; a window that needed more
than every earlier window (a *record*) it meets only by waiting longer than anything it had seen
justified. A missed record window is judged *infeasible*, with its evidence: its need and the
largest need of the windows before it. (Judging by every earlier window, known or not by the
time the window closed, errs towards calling a window feasible.)

>>> from outoforder.core.windows.assign import Windows
>>> ms = 1_000  # arrival order: 3 ms and 9 ms come after the stream passed 10 ms
>>> ts = np.array([0, 5, 12, 3, 18, 9]) * ms
>>> ids, needs = window_needs(ts, np.ones(6), Windows(10 * ms, 10 * ms), "count", 0.05)
>>> ids.tolist(), needs.tolist()   # window 0 waits for 9 ms (8 ms late): the grid's edge above
([0, 1], [8514, 0])
>>> [(v.window, v.needed_us, v.seen_before_us, v.feasible) for v in window_verdicts(ids, needs)]
[(0, 8514, 0, False), (1, 0, 8514, True)]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.windows.assign import Windows
from outoforder.core.windows.lateness import bucket_of, needed_slacks, profiles

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def window_needs(
    ts: IntArray, values: FloatArray, windows: Windows, aggregate: str, eps: float, lambda_thr: float = 1.0
) -> tuple[IntArray, IntArray]:
    """(every window with members, ascending; the least constant K its result needs, µs).

    A member's lateness is the stream's progress before it arrived (the largest event time of
    the arrivals before it) less its window's end; ``lambda_thr`` is the coverage a quantile needs.
    """
    ts = np.asarray(ts, dtype=np.int64)
    if ts.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    before = np.concatenate([[np.iinfo(np.int64).min // 2], np.maximum.accumulate(ts)[:-1]])
    member, wid = windows.explode(ts)
    ids, row = np.unique(wid, return_inverse=True)
    late = before[member] - windows.end_of(wid)
    p = profiles(row, bucket_of(late), np.asarray(values, dtype=np.float64)[member], ids.size)
    return ids.astype(np.int64), needed_slacks(p, aggregate, eps, np.full(ids.size, lambda_thr))


@dataclass(frozen=True)
class WindowVerdict:
    """Whether a controller reading the past could have met one window, and the evidence."""

    window: int
    needed_us: int
    seen_before_us: int  # the largest need of the windows before it
    feasible: bool

    def reason(self) -> str:
        """The evidence in words (empty when the window was feasible)."""
        if self.feasible:
            return ""
        return (
            f"needed K = {self.needed_us / 1e6:.3g} s; the most any window before it needed was "
            f"{self.seen_before_us / 1e6:.3g} s"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with the reason."""
        return asdict(self) | {"reason": self.reason()}


def window_verdicts(ids: IntArray, needs: IntArray) -> list[WindowVerdict]:
    """A verdict per window (``ids`` ascending): infeasible when it needed more than every earlier one."""
    seen = np.concatenate([[0], np.maximum.accumulate(needs)[:-1]]) if needs.size else needs
    return [
        WindowVerdict(int(w), int(n), int(s), bool(n <= s))
        for w, n, s in zip(ids.tolist(), needs.tolist(), seen.tolist(), strict=True)
    ]
