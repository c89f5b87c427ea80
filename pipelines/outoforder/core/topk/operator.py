"""The continuous top-k operator over an out-of-order stream, tuple at a time (docs/operators.md).

State (the modified MinTopk of the seed, after Yang et al., EDBT 2011):

- one candidate list ``C``: every tuple that is in the top-k of at least one open window, stored
  once with the set of windows it is in the top-k of (the seed's ``[start, end]`` ids; with late
  tuples that set need not be an interval, so the set itself is kept);
- per open window, its top-k as ``k`` references into ``C`` ordered by score, so the window's
  minimum is one lookup (the seed's per-window minimum pointer). A new tuple enters a window only
  if it beats that minimum, which then loses the window and leaves ``C`` once it has none;
- windows are emitted in order once the stream's progress passes ``end + K`` (K: the cache
  duration in force, from a :class:`~outoforder.core.topk.cache.CachePolicy`: the adaptive
  :class:`~outoforder.core.topk.cache.CacheDurationController` or a ``FixedCache``);
  emission expires the window: its members lose it.

For the cache controller, the operator also records, for every window, the top-k it held when the
progress passed ``end + K_i`` for each candidate duration ``K_i``; after the emission it keeps the
window's exact top-k up to date with the late tuples (top-k of a union = top-k of the two top-ks),
and ``horizon_us`` after the emission it scores the candidates (hit rate against that top-k) and
feeds the controller. Tuples that arrive after all their windows were emitted are returned as
``late``, never dropped silently.

>>> from outoforder.core.windows.assign import Windows
>>> op = ContinuousTopK(TopKQuery(Windows(10, 10), k=1), FixedCache(0))
>>> [op.process(ts, s, i) for i, (ts, s) in enumerate([(1, 1.0), (12, 7.0), (5, 9.0)])][1]
Step(emitted=[Emission(window_id=0, tids=[0], at_index=1, cache_us=0)], late=[])
>>> op.process(25, 3.0, 3).late, op.flush()[-1]
([], Emission(window_id=2, tids=[3], at_index=4, cache_us=0))

:class:`TopK` is the same operator with the streaming protocol (:mod:`outoforder.core.protocol`):
a batch of arrivals (``value`` is the score) in, emitted windows and late memberships out.

>>> from outoforder.core.protocol import Arrival
>>> op = TopK(TopKQuery(Windows(10, 10), k=1), cache=0)
>>> out = op.process([Arrival(0, 1, 1.0), Arrival(1, 12, 7.0), Arrival(2, 5, 9.0)])
>>> [(e.window_id, e.tids) for e in out.emitted], out.late
([(0, [0])], [Late(id=2, ts=5, window=0)])
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from outoforder.core.protocol import Arrival, Late, Output
from outoforder.core.topk.cache import (
    CacheDurationController,
    CachePolicy,
    CacheSettings,
    Decision,
    FixedCache,
    LatenessController,
    LatenessSettings,
)
from outoforder.core.topk.reference import hit_rate
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError, StateError


@dataclass(frozen=True)
class TopKQuery:
    """Windows, k, and how long after an emission the late tuples are still awaited."""

    windows: Windows
    k: int = 5
    horizon_us: int = 10_000_000

    def __post_init__(self) -> None:
        if self.k < 1 or self.horizon_us < 0:
            msg = f"need k >= 1 and horizon >= 0, got k={self.k}, horizon={self.horizon_us}"
            raise ConfigError(msg)


@dataclass(frozen=True)
class Emission:
    """A window's result: tuple ids best first, the arrival index that triggered it, K in force.

    ``scores`` and ``times`` are the listed tuples' scores and event times, in the same order.
    """

    window_id: int
    tids: list[int]
    at_index: int
    cache_us: float
    scores: tuple[float, ...] = field(default=(), repr=False, compare=False)
    times: tuple[int, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Step:
    """What one arrival produced."""

    emitted: list[Emission]
    late: list[int]  # window ids the tuple belonged to but arrived after their emission


@dataclass(frozen=True)
class Settled:
    """An emitted window once its late tuples were awaited: how good its list was, what it needed.

    ``hit`` is the emitted list's hit rate against the top-k known at settlement; ``exact_us`` the
    cache duration at which the list would have been exact (its latest true member's lateness,
    plus 1 µs): the bound a user would have needed for this window. Late tuples were awaited
    until ``awaited_us`` after the window's end (K plus the query's horizon): a member arriving
    later is not known, so an ``exact_us`` close to ``awaited_us`` is a lower bound.
    """

    window_id: int
    hit: float
    cache_us: float
    exact_us: float
    awaited_us: float
    lateness: tuple[float, ...]  # per member of the top-k known at settlement, best first


@dataclass
class _Candidate:
    score: float
    ts: int
    windows: set[int]
    seen: float  # the stream's progress when the tuple arrived


@dataclass
class _Settling:
    """An emitted window waiting for its late tuples: the candidates' lists and the exact top-k."""

    due_progress: float
    recorded: list[list[int]]
    exact: list[tuple[float, int, float]]  # (score, tid, progress at its arrival) best first
    cache_us: float  # K in force at the emission

    def lateness(self, end: int) -> list[float]:
        """The exact top-k members' lateness: progress at arrival minus the window's end."""
        return [seen - end for _, _, seen in self.exact]


@dataclass
class ContinuousTopK:
    """The operator's state; :meth:`process` one arrival, :meth:`flush` at the end of the stream."""

    query: TopKQuery
    cache: CachePolicy
    progress: float = -math.inf
    index: int = 0
    next_emit: int = -(2**62)  # every window below this one is emitted (or was due empty)
    open: dict[int, list[tuple[float, int]]] = field(default_factory=dict)  # wid -> (-score, tid) asc
    candidates: dict[int, _Candidate] = field(default_factory=dict)
    recorded: dict[int, list[list[int]]] = field(default_factory=dict)  # wid -> lists per candidate K
    settling: dict[int, _Settling] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    decided_at: list[tuple[int, float]] = field(
        default_factory=list
    )  # (arrival index, progress) per decision
    settled: list[Settled] = field(default_factory=list)  # windows scored, in order
    # windows emitted without a tuple, (first, last, progress, K) ranges, until the horizon passes:
    # a tuple coming late into one makes it a window to settle like the others
    empty: list[tuple[int, int, float, float]] = field(default_factory=list)
    _changed: bool = False  # an emission or a late member changed what the unsettled windows show
    _next_record: float = -math.inf  # the smallest progress at which a candidate list is due
    _stale: bool = True  # the cached worst minimum needs a refresh
    _run: tuple[int, int] | None = None  # the newest run of consecutive open, full windows
    _worst: tuple[float, int] | None = None  # the worst minimum (largest key) over that run

    def _enter(self, wid: int, score: float, tid: int, ts: int) -> None:
        top = self.open.get(wid)
        if top is None:  # a new window: the candidates already due held nothing
            end = self.query.windows.bounds(wid)[1]
            self.recorded[wid] = [[] for c in self.cache.candidates() if self.progress >= end + c]
            self._next_record = -math.inf
            top = self.open[wid] = []
        key = (-score, tid)
        k = self.query.k
        if len(top) >= k and key >= top[-1]:
            return  # does not beat the window's minimum
        bisect.insort(top, key)
        self._stale = True
        self.candidates.setdefault(tid, _Candidate(score, ts, set(), self.progress)).windows.add(wid)
        if len(top) > k:
            _, out = top.pop()
            self._leave(out, wid)

    def _leave(self, tid: int, wid: int) -> None:
        c = self.candidates[tid]
        c.windows.discard(wid)
        if not c.windows:
            del self.candidates[tid]

    def _top(self, wid: int) -> list[int]:
        return [t for _, t in self.open.get(wid, [])]

    def _rejected(self, key: tuple[float, int], first: int, last: int) -> bool:
        """Whether the tuple beats no minimum of its windows ``[first, last]``, in O(1) mostly.

        MinTopk's shortcut: most tuples of a long window enter no top-k. Over the newest run of open,
        full windows the worst minimum is cached (refreshed only after an insertion or a new
        window); a key no better than it, for windows all inside the run, enters none of them.
        """
        if self._stale:
            self._run, self._worst = None, None
            hi = max(self.open, default=None)
            lo = hi
            while lo is not None and len(self.open.get(lo, ())) >= self.query.k:
                lo -= 1
            if hi is not None and lo is not None and lo < hi:
                self._run = (lo + 1, hi)
                self._worst = max(self.open[w][-1] for w in range(lo + 1, hi + 1))
            self._stale = False
        if self._run is None or self._worst is None:
            return False
        return self._run[0] <= first and last <= self._run[1] and key >= self._worst

    def process(self, ts: int, score: float, tid: int) -> Step:
        """One arrival: emit what is due before it (so it cannot enter them), then insert it."""
        slide, size = self.query.windows.slide_us, self.query.windows.size_us
        first, last = (ts - size) // slide + 1, ts // slide
        if ts > self.progress or self._next_record == -math.inf:  # or new windows / durations
            self.progress = max(self.progress, ts)
            emitted = self._advance()
        else:
            emitted = []
        late: list[int] = []
        if first < self.next_emit:
            late = list(range(first, min(last + 1, self.next_emit)))
            for wid in late:
                self._settle_late(wid, score, tid)
            first = self.next_emit
        if first <= last and not self._rejected((-score, tid), first, last):
            for wid in range(first, last + 1):
                self._enter(wid, score, tid, ts)
        self.index += 1
        if self.settling:
            self._score_settled()
        if self._changed:
            self._changed = False
            w = self.query.windows
            profiles = [s.lateness(w.bounds(i)[1]) for i, s in self.settling.items()]
            self._decided(self.cache.provisional(profiles))
        return Step(emitted, late)

    def _decided(self, d: Decision | None) -> None:
        if d is not None:
            self.decisions.append(d)
            self.decided_at.append((self.index - 1, self.progress))
            self._next_record = -math.inf  # new candidate durations

    def _advance(self) -> list[Emission]:
        """Record candidate lists and emit every window whose ``end + K`` the progress passed."""
        w = self.query.windows
        if self.progress >= self._next_record:
            cands = self.cache.candidates()
            nxt = math.inf
            for wid, rec in self.recorded.items():
                end = w.bounds(wid)[1]
                while len(rec) < len(cands) and self.progress >= end + cands[len(rec)]:
                    rec.append(self._top(wid))
                if len(rec) < len(cands):
                    nxt = min(nxt, end + cands[len(rec)])
            self._next_record = nxt
        k_now = self.cache.k_min_us
        # every window with end + K <= progress is due, with or without tuples
        last_due = w.last_closed(self.progress - k_now)
        if last_due < self.next_emit:
            return []
        lo = self.next_emit
        due = [wid for wid in sorted(self.open) if wid <= last_due]
        out = [self._emit(wid, k_now) for wid in due]
        if self.cache.candidates():
            self._expire_empty()
            for wid in [*due, last_due + 1]:
                if wid > lo:
                    self.empty.append((lo, wid - 1, self.progress, k_now))
                lo = wid + 1
        self.next_emit = max(self.next_emit, last_due + 1)
        return out

    def _emit(self, wid: int, cache_us: float) -> Emission:
        tids = self._top(wid)
        top = self.open.pop(wid, [])
        scores = tuple(-s for s, _ in top)
        times = tuple(self.candidates[t].ts for _, t in top)
        exact = [(-s, t, self.candidates[t].seen) for s, t in top]
        for _, t in top:
            self._leave(t, wid)
        rec = self.recorded.pop(wid, [])
        cands = self.cache.candidates()
        if cands and top:
            rec = rec + [tids] * (len(cands) - len(rec))  # durations up to K_up end here
            self.settling[wid] = _Settling(self.progress + self.query.horizon_us, rec, exact, cache_us)
            self._changed = True
        self.next_emit = max(self.next_emit, wid + 1)
        return Emission(wid, tids, self.index, cache_us, scores, times)

    def _settle_late(self, wid: int, score: float, tid: int) -> None:
        s = self.settling.get(wid) or self._settle_empty(wid)
        if s is None:
            return
        s.exact.append((score, tid, self.progress))
        s.exact.sort(key=lambda x: (-x[0], x[1]))
        dropped = s.exact.pop() if len(s.exact) > self.query.k else None
        if dropped is None or dropped[1] != tid:
            self._changed = True  # a true member so far: a miss the controller can see now

    def _expire_empty(self) -> None:
        """Forget the empty emissions whose horizon has passed: they will never be settled."""
        while self.empty and self.empty[0][2] + self.query.horizon_us <= self.progress:
            self.empty.pop(0)

    def _settle_empty(self, wid: int) -> _Settling | None:
        """The first late tuple of a window emitted empty: it is awaited and settled like the others."""
        horizon = self.query.horizon_us
        self._expire_empty()
        for i, (lo, hi, at, k) in enumerate(self.empty):
            if lo <= wid <= hi:
                self.empty[i : i + 1] = [
                    r for r in ((lo, wid - 1, at, k), (wid + 1, hi, at, k)) if r[0] <= r[1]
                ]
                s = _Settling(at + horizon, [[] for _ in self.cache.candidates()], [], k)
                self.settling[wid] = s
                # settlement goes by due progress: this window was emitted before the ones after it
                self.settling = dict(sorted(self.settling.items(), key=lambda x: x[1].due_progress))
                return s
        return None

    def _score_settled(self) -> None:
        # settling is kept in order of due progress (emission order; see _settle_empty)
        while self.settling:
            wid, s = next(iter(self.settling.items()))
            if self.progress < s.due_progress:
                break
            del self.settling[wid]
            truth = [t for _, t, _ in s.exact]
            end = self.query.windows.bounds(wid)[1]
            lateness = s.lateness(end)
            hit = sum(x < s.cache_us for x in lateness) / len(lateness)  # what the emitted list held
            exact = max(0.0, max(lateness) + 1.0)
            self.settled.append(Settled(wid, hit, s.cache_us, exact, s.due_progress - end, tuple(lateness)))
            self._decided(self.cache.observe([hit_rate(r, truth) for r in s.recorded], lateness))
            self._changed = True  # the window left the unsettled ones

    def snapshot(self) -> dict[str, Any]:
        """The operator's state as JSON-able data (the cache policy snapshots itself).

        Progress values are written as floats, as :meth:`restore` reads them: a snapshot of a
        restored operator is the same text as one of an operator that never stopped.
        """
        return {
            "progress": None if self.progress == -math.inf else float(self.progress),
            "index": self.index,
            "next_emit": self.next_emit,
            "open": [[w, [list(x) for x in top]] for w, top in self.open.items()],
            "candidates": [
                [t, c.score, c.ts, sorted(c.windows), float(c.seen)] for t, c in self.candidates.items()
            ],
            "recorded": [[w, rec] for w, rec in self.recorded.items()],
            "settling": [
                [
                    w,
                    float(s.due_progress),
                    s.recorded,
                    [[float(a), int(b), float(c)] for a, b, c in s.exact],
                    float(s.cache_us),
                ]
                for w, s in self.settling.items()
            ],
            "empty": [[int(a), int(b), float(c), float(d)] for a, b, c, d in self.empty],
        }

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` into this operator (its cache policy is restored by the caller)."""
        query, cache = self.query, self.cache
        try:
            op = ContinuousTopK(query, cache)
            op.progress = -math.inf if snap["progress"] is None else float(snap["progress"])
            op.index, op.next_emit = int(snap["index"]), int(snap["next_emit"])
            op.open = {int(w): [(float(a), int(b)) for a, b in top] for w, top in snap["open"]}
            # snapshots written before the lateness controller lack the arrival progress: a candidate
            # is then taken as on time, a settling member as arrived at the emission
            op.candidates = {
                int(c[0]): _Candidate(
                    float(c[1]), int(c[2]), {int(w) for w in c[3]}, float(c[4] if len(c) > 4 else c[2])
                )
                for c in snap["candidates"]
            }
            op.recorded = {int(w): [[int(t) for t in r] for r in rec] for w, rec in snap["recorded"]}
            op.settling = {}
            for x in snap["settling"]:
                emitted_at = float(x[1]) - query.horizon_us
                exact = [(float(e[0]), int(e[1]), float(e[2] if len(e) > 2 else emitted_at)) for e in x[3]]
                k_at = float(x[4]) if len(x) > 4 else cache.k_min_us
                op.settling[int(x[0])] = _Settling(
                    float(x[1]), [[int(t) for t in r] for r in x[2]], exact, k_at
                )
            op.empty = [(int(a), int(b), float(c), float(d)) for a, b, c, d in snap.get("empty", [])]
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a top-k operator snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e
        self.__dict__.update(op.__dict__)  # all or nothing: a bad snapshot leaves this one as it was

    def flush(self) -> list[Emission]:
        """End of stream: emit every open window with what it has."""
        return [self._emit(wid, self.cache.k_min_us) for wid in sorted(self.open)]

    @property
    def candidate_count(self) -> int:
        """|C|: tuples held (the memory measure)."""
        return len(self.candidates)

    @property
    def state_rows(self) -> int:
        """Every entry the state holds: candidates, open top lists, recorded and settling lists."""
        recorded = sum(len(r) for rec in self.recorded.values() for r in rec)
        settling = sum(len(s.exact) + sum(len(r) for r in s.recorded) for s in self.settling.values())
        return len(self.candidates) + sum(len(t) for t in self.open.values()) + recorded + settling


@dataclass(frozen=True)
class TopKOutput(Output[Emission]):
    """The protocol's output, and the windows settled during the call (see :class:`Settled`).

    ``settled_at`` holds, per settled window, the id of the arrival at which it settled.
    """

    settled: list[Settled] = field(default_factory=list)
    settled_at: list[int] = field(default_factory=list)


class TopK:
    """The continuous top-k as a streaming operator: :class:`ContinuousTopK` behind the protocol.

    ``cache`` is the cache duration's settings (:class:`LatenessSettings`: the lateness controller;
    :class:`CacheSettings`: the seed's controller) or a fixed duration in µs. An arrival's ``value``
    is its score; an arrival without a score (NaN) is not ranked and is counted in :attr:`unscored`.
    Late items are memberships of windows emitted before the tuple arrived; settled windows say
    how good their list was once their late tuples were in (adaptive caches only).
    """

    def __init__(
        self, query: TopKQuery, cache: LatenessSettings | CacheSettings | float = 2_000_000.0
    ) -> None:
        self.query = query
        self.cache = cache
        self.unscored = 0  # arrivals without a score since this object was built
        self.op = ContinuousTopK(query, self._policy(None))

    def _policy(self, snap: Mapping[str, Any] | None) -> CachePolicy:
        if not isinstance(self.cache, LatenessSettings | CacheSettings):
            return FixedCache(float(self.cache))
        policy = (
            LatenessController(self.cache)
            if isinstance(self.cache, LatenessSettings)
            else CacheDurationController(self.cache)
        )
        if snap is not None:
            policy.restore(snap)
        return policy

    def process(self, batch: Sequence[Arrival]) -> TopKOutput:
        """Rank each arrival into its open windows; windows emitted, late memberships, windows settled."""
        out = TopKOutput()
        settled = len(self.op.settled)
        for a in batch:
            if math.isnan(a.value):
                self.unscored += 1
                continue
            before = len(self.op.settled)
            step = self.op.process(int(a.ts), float(a.value), int(a.id))
            out.emitted.extend(step.emitted)
            out.late.extend(Late(a.id, a.ts, wid) for wid in step.late)
            out.settled_at.extend([a.id] * (len(self.op.settled) - before))
        out.settled.extend(self.op.settled[settled:])
        del self.op.settled[:]  # handed over: the operator keeps no growing record
        return out

    def flush(self) -> TopKOutput:
        """The end of the stream: every open window with what it has."""
        return TopKOutput(self.op.flush())

    def snapshot(self) -> dict[str, Any]:
        """``{"operator": …, "cache": …}``: the operator's state and the controller's (None if fixed)."""
        cache = self.op.cache
        return {
            "operator": self.op.snapshot(),
            "cache": cache.snapshot()
            if isinstance(cache, CacheDurationController | LatenessController)
            else None,
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a top-k with the same query and cache settings."""
        try:
            operator, cache = snapshot["operator"], snapshot.get("cache")
        except (KeyError, TypeError, AttributeError) as e:
            msg = f"not a top-k snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e
        op = ContinuousTopK(self.query, self._policy(cache))
        op.restore(operator)
        self.op = op
