"""The naive continuous top-k: keep every tuple of the open windows, rank a window when it is due.

The yardstick of the update cost: each emission ranks the window's tuples from scratch
(``heapq.nsmallest``: O(n log k) for n members), where :class:`~outoforder.core.topk.operator.
ContinuousTopK` maintains the top-k as tuples arrive. Emission uses the same cache rule (a window is
emitted once the progress reaches ``end + K``, from what arrived before), so both emit the same
lists; memory is the whole window, not a candidate set.

>>> from outoforder.core.windows.assign import Windows
>>> op = RecomputeTopK(Windows(10, 10), k=1, cache_us=0)
>>> [op.process(ts, s, i) for i, (ts, s) in enumerate([(1, 1.0), (3, 7.0), (12, 2.0)])][-1]
[(0, [1])]
>>> op.flush()
[(1, [2])]
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError


@dataclass
class RecomputeTopK:
    """Buffer the open windows' tuples; :meth:`process` returns ``(window id, tids)`` emissions."""

    windows: Windows
    k: int
    cache_us: float = 0.0
    progress: float = -math.inf
    next_emit: int = -(2**62)
    buffer: deque[tuple[int, float, int]] = field(default_factory=deque)  # (ts, score, tid)
    seen_windows: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.k < 1 or self.cache_us < 0:
            msg = f"need k >= 1 and a cache duration >= 0, got k={self.k}, cache={self.cache_us}"
            raise ConfigError(msg)

    def _emit_due(self, last_due: int | None = None) -> list[tuple[int, list[int]]]:
        w = self.windows
        if last_due is None:
            last_due = w.last_closed(self.progress - self.cache_us)
        out = []
        for wid in sorted(x for x in self.seen_windows if x <= last_due):
            lo, hi = w.bounds(wid)
            best = heapq.nsmallest(self.k, ((-s, t) for x, s, t in self.buffer if lo <= x < hi))
            out.append((wid, [t for _, t in best]))
            self.seen_windows.discard(wid)
        if last_due + 1 > self.next_emit:
            self.next_emit = last_due + 1
            # a tuple whose last window was emitted can never be ranked again (once per slide)
            expired = w.bounds(self.next_emit)[0]
            self.buffer = deque(b for b in self.buffer if b[0] >= expired)
        return out

    def process(self, ts: int, score: float, tid: int) -> list[tuple[int, list[int]]]:
        """One arrival: emit what is due before it, then buffer it (unless it is late for all)."""
        self.progress = max(self.progress, ts)
        out = self._emit_due()
        first = max(int(self.windows.first_id(ts)), self.next_emit)
        last = int(self.windows.last_id(ts))
        if first <= last:
            self.seen_windows.update(range(first, last + 1))
            self.buffer.append((ts, score, tid))
        return out

    def flush(self) -> list[tuple[int, list[int]]]:
        """End of stream: emit every window still open."""
        return self._emit_due(max(self.seen_windows, default=self.next_emit))

    @property
    def candidate_count(self) -> int:
        """Tuples buffered (the memory measure)."""
        return len(self.buffer)
