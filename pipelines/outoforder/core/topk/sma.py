"""SMA, the k-skyband baseline (Mouratidis, Bakiras & Papadias, SIGMOD 2006), on an out-of-order stream.

SMA keeps the *k-skyband* of the open windows: a tuple stays a candidate while fewer than ``k``
tuples dominate it, where ``d`` dominates ``c`` when ``d`` scores higher (ties: smaller id) and is
in every open window ``c`` is in (``d`` expires no earlier, and is not younger than the oldest open
window that holds ``c``). A tuple dominated ``k`` times can never again be in a window's top-k, so
it is dropped; every window's top-k is among the candidates. Emission uses the same cache rule as
:mod:`outoforder.core.topk.operator` (K = 0: at the window's close, the in-order setting of the
paper).

Out of order, a late tuple may have an *earlier* first window than a candidate it outscores, so it
does not dominate that candidate in the candidate's older windows: dominance is counted only when it
holds for every open window of the candidate, at the dominator's arrival (counts are not revised
when windows close later, so the skyband may keep more tuples than needed, never fewer).

>>> from outoforder.core.protocol import Arrival
>>> from outoforder.core.windows.assign import Windows
>>> op = SkybandTopK(Windows(10, 10), k=1, cache_us=0)
>>> op.process([Arrival(i, ts, s) for i, (ts, s) in enumerate([(1, 1.0), (3, 7.0), (12, 2.0)])]).emitted
[Ranked(window_id=0, tids=(1,))]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from outoforder.core.topk.naive import TupleTopK


@dataclass
class _Member:
    score: float
    tid: int
    first: int
    last: int
    dominated: int = 0


@dataclass
class SkybandTopK(TupleTopK):
    """SMA with a fixed cache duration."""

    members: list[_Member] = field(default_factory=list)

    def _members(self) -> list[list[Any]]:
        return [[m.score, m.tid, m.first, m.last, m.dominated] for m in self.members]

    def _load(self, members: list[list[Any]]) -> None:
        self.members = [_Member(float(s), int(t), int(f), int(la), int(d)) for s, t, f, la, d in members]

    def _emit_due(self, last_due: int | None = None) -> list[tuple[int, list[int]]]:
        w = self.windows
        if last_due is None:
            last_due = w.last_closed(self.progress - self.cache_us)
        out = []
        for wid in sorted(x for x in self.seen_windows if x <= last_due):
            inside = [m for m in self.members if m.first <= wid <= m.last]
            inside.sort(key=lambda m: (-m.score, m.tid))
            out.append((wid, [m.tid for m in inside[: self.k]]))
            self.seen_windows.discard(wid)
        self.next_emit = max(self.next_emit, last_due + 1)
        self.members = [m for m in self.members if m.last >= self.next_emit]  # expired: gone
        return out

    def arrive(self, ts: int, score: float, tid: int) -> list[tuple[int, list[int]]]:
        """One arrival: emit what is due before it, then add it to the skyband."""
        self.progress = max(self.progress, ts)
        out = self._emit_due()
        first = max(int(self.windows.first_id(ts)), self.next_emit)
        last = int(self.windows.last_id(ts))
        if first > last:
            return out  # every window of the tuple was emitted: late for all of them
        self.seen_windows.update(range(first, last + 1))
        new = _Member(score, tid, first, last)
        keep = []
        for m in self.members:
            if _beats(m, new) and m.first <= new.first and m.last >= new.last:
                new.dominated += 1
            if _beats(new, m) and new.first <= max(m.first, self.next_emit) and new.last >= m.last:
                m.dominated += 1
            if m.dominated < self.k:
                keep.append(m)
        if new.dominated < self.k:
            keep.append(new)
        self.members = keep
        return out

    def close(self) -> list[tuple[int, list[int]]]:
        """End of stream: emit every window still open."""
        return self._emit_due(max(self.seen_windows, default=self.next_emit))

    @property
    def candidate_count(self) -> int:
        """The skyband's size (the memory measure)."""
        return len(self.members)


def _beats(a: _Member, b: _Member) -> bool:
    return (a.score, -a.tid) > (b.score, -b.tid)
