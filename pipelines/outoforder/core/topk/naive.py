"""The naive continuous top-k: keep every tuple of the open windows, rank a window when it is due.

The yardstick of the update cost: each emission ranks the window's tuples from scratch
(``heapq.nsmallest``: O(n log k) for n members), where :class:`~outoforder.core.topk.operator.
ContinuousTopK` maintains the top-k as tuples arrive. Emission uses the same cache rule (a window is
emitted once the progress reaches ``end + K``, from what arrived before), so both emit the same
lists; memory is the whole window, not a candidate set.

Both baselines here (this and :class:`~outoforder.core.topk.sma.SkybandTopK`) keep the streaming
protocol (:mod:`outoforder.core.protocol`): :meth:`TupleTopK.process` takes a batch of arrivals and
returns the :class:`Ranked` windows and the late memberships; :meth:`TupleTopK.arrive` is the one
arrival step the benchmark times.

>>> from outoforder.core.protocol import Arrival
>>> from outoforder.core.windows.assign import Windows
>>> op = RecomputeTopK(Windows(10, 10), k=1, cache_us=0)
>>> op.process([Arrival(i, ts, s) for i, (ts, s) in enumerate([(1, 1.0), (3, 7.0), (12, 2.0)])]).emitted
[Ranked(window_id=0, tids=(1,))]
>>> op.process([Arrival(3, 5, 9.0)]).late  # window 0 was emitted before it came
[Late(id=3, ts=5, window=0)]
>>> op.flush().emitted
[Ranked(window_id=1, tids=(2,))]
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from outoforder.core.protocol import Arrival, Late, Output
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError, StateError


@dataclass(frozen=True)
class Ranked:
    """A window's top-k as a baseline emits it: tuple ids, best first."""

    window_id: int
    tids: tuple[int, ...]


@dataclass
class TupleTopK(ABC):
    """What the tuple-at-a-time baselines share: the cache rule, the protocol, the snapshot's frame."""

    windows: Windows
    k: int
    cache_us: float = 0.0
    progress: float = -math.inf
    next_emit: int = -(2**62)
    seen_windows: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.k < 1 or self.cache_us < 0:
            msg = f"need k >= 1 and a cache duration >= 0, got k={self.k}, cache={self.cache_us}"
            raise ConfigError(msg)

    @abstractmethod
    def arrive(self, ts: int, score: float, tid: int) -> list[tuple[int, list[int]]]:
        """One arrival: the ``(window id, tids)`` emitted before it; then it is kept (unless late for all)."""

    @abstractmethod
    def close(self) -> list[tuple[int, list[int]]]:
        """End of stream: every window still open."""

    @abstractmethod
    def _members(self) -> list[list[Any]]:
        """The kept tuples as plain lists (the snapshot's)."""

    @abstractmethod
    def _load(self, members: list[list[Any]]) -> None:
        """Kept tuples from :meth:`_members`'s form."""

    def process(self, batch: Sequence[Arrival]) -> Output[Ranked]:
        """A batch of arrivals: the windows emitted, and each membership in a window emitted before it came.

        An arrival without a score (NaN) is not ranked, as in :class:`~outoforder.core.topk.operator.TopK`.
        """
        emitted: list[Ranked] = []
        late: list[Late] = []
        for a in batch:
            if math.isnan(a.value):
                continue
            emitted += [Ranked(w, tuple(t)) for w, t in self.arrive(a.ts, a.value, a.id)]
            first = int(self.windows.first_id(a.ts))
            late += [
                Late(a.id, a.ts, w)
                for w in range(first, min(int(self.windows.last_id(a.ts)) + 1, self.next_emit))
            ]
        return Output(emitted, late)

    def flush(self) -> Output[Ranked]:
        """End of stream: emit every window still open."""
        return Output([Ranked(w, tuple(t)) for w, t in self.close()], [])

    def snapshot(self) -> dict[str, Any]:
        """The state as plain data."""
        progress = None if self.progress == -math.inf else self.progress
        seen = sorted(self.seen_windows)
        return {"progress": progress, "next_emit": self.next_emit, "seen": seen, "members": self._members()}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a baseline with the same settings."""
        try:
            progress = snapshot["progress"]
            self.progress = -math.inf if progress is None else float(progress)
            self.next_emit = int(snapshot["next_emit"])
            self.seen_windows = {int(w) for w in snapshot["seen"]}
            self._load(list(snapshot["members"]))
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a {type(self).__name__} snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e


@dataclass
class RecomputeTopK(TupleTopK):
    """Buffer the open windows' tuples; rank a window from scratch when it is due."""

    buffer: deque[tuple[int, float, int]] = field(default_factory=deque)  # (ts, score, tid)

    def _members(self) -> list[list[Any]]:
        return [list(b) for b in self.buffer]

    def _load(self, members: list[list[Any]]) -> None:
        self.buffer = deque((int(ts), float(s), int(t)) for ts, s, t in members)

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

    def arrive(self, ts: int, score: float, tid: int) -> list[tuple[int, list[int]]]:
        """One arrival: emit what is due before it, then buffer it (unless it is late for all)."""
        self.progress = max(self.progress, ts)
        out = self._emit_due()
        first = max(int(self.windows.first_id(ts)), self.next_emit)
        last = int(self.windows.last_id(ts))
        if first <= last:
            self.seen_windows.update(range(first, last + 1))
            self.buffer.append((ts, score, tid))
        return out

    def close(self) -> list[tuple[int, list[int]]]:
        """End of stream: emit every window still open."""
        return self._emit_due(max(self.seen_windows, default=self.next_emit))

    @property
    def candidate_count(self) -> int:
        """Tuples buffered (the memory measure)."""
        return len(self.buffer)
