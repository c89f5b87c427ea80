"""K-slack joins: reorder each stream with a K-slack buffer, then join the ordered streams.

Buffer (Abadi et al., Aurora; per stream X): K_X is the slack in force; the release frontier
F_X = running max of (M_X - K_X) never moves back. On the arrival of t in X:

1. delay(t) = M_X - t.ts (before t; 0 if on time); MP-K-slack (Mutschler & Philippsen 2013)
   raises K_X to the largest delay seen, fixed K-slack keeps it, AQ-K-slack sets it per period;
2. t is *late* -- dropped, returned as such -- if t.ts < F_X (its place in the released order has
   passed: "tuples with delay > K are lost");
3. M_X <- max(M_X, t.ts); F_X <- max(F_X, M_X - K_X); release buffered tuples with ts <= F_X in
   ts order (ties by arrival) into the join;
4. the join of the two ordered streams: a released tuple joins the other stream's released tuples
   in its window and is kept until ts < min(F_R, F_S) - w (no later release of either stream can
   match it then). Whatever is still buffered at the end is released by a final flush.

Set form: a true pair is produced iff neither tuple is late; it is emitted when the second of
the two is released, and a tuple's release is the first arrival at which F_X reaches its ts
(a search over the monotone F). Latency = M_X(release) - M_X(arrival), in progress units.

>>> from outoforder.core.joins.query import JoinInput, JoinQuery
>>> q = JoinQuery(window_us=10, theta=1.0)
>>> inp = JoinInput.from_rows([(0, 100), (1, 100), (0, 130), (1, 130), (0, 95)])
>>> run = kslack_set(inp, q, FixedK(20, 20))
>>> run.pairs.tolist(), run.emitted_at.tolist(), run.late.tolist()
([[0, 1], [2, 3]], [3, 5], [False, False, False, False, True])
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import (
    NEG,
    count_alive,
    first_exceeding,
    first_reaching,
    previous,
    running_max,
    stream_max,
)
from outoforder.core.joins.qjoin import JoinRun
from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, R, S, exact_join, sort_pairs
from outoforder.core.protocol import Arrival, Late, Output
from outoforder.errors import StateError

IntArray = npt.NDArray[np.int64]
Row = tuple[int, float, float, int]


@dataclass(frozen=True)
class FixedK:
    """K-slack with a fixed slack per stream (µs)."""

    k_r: int
    k_s: int

    def slack(self, inp: JoinInput, delays: IntArray) -> tuple[IntArray, IntArray]:
        """K_X in force at each arrival."""
        n = len(inp)
        return np.full(n, self.k_r, dtype=np.int64), np.full(n, self.k_s, dtype=np.int64)


@dataclass(frozen=True)
class MaxDelayK:
    """MP-K-slack: K_X is the largest delay seen so far on X (K only grows)."""

    def slack(self, inp: JoinInput, delays: IntArray) -> tuple[IntArray, IntArray]:
        """K_X in force at each arrival (including that arrival's own delay)."""
        return (
            running_max(np.where(inp.side == R, delays, 0)),
            running_max(np.where(inp.side == S, delays, 0)),
        )


@dataclass(frozen=True)
class ScheduledK:
    """K_X given per arrival (AQ-K-slack's adaptation writes such a schedule)."""

    k_r: IntArray
    k_s: IntArray

    def slack(self, inp: JoinInput, delays: IntArray) -> tuple[IntArray, IntArray]:
        """K_X in force at each arrival."""
        return self.k_r, self.k_s


SlackPolicy = FixedK | MaxDelayK | ScheduledK


def arrival_delays(inp: JoinInput) -> IntArray:
    """delay(t) = M_X just before t minus t.ts (0 when on time), per arrival, own stream X."""
    d = np.zeros(len(inp), dtype=np.int64)
    for side in (R, S):
        before = previous(stream_max(inp, side))
        mine = (inp.side == side) & (before > NEG)
        d[mine] = np.maximum(before[mine] - inp.ts[mine], 0)
    return d


def slack_requirements(inp: JoinInput, pairs: PairArray) -> IntArray:
    """Per pair: the least fixed K (both streams) that keeps it -- neither tuple late.

    A tuple is late under a fixed K exactly when its delay exceeds K, so a pair needs the larger
    of its two tuples' delays.
    """
    delays = arrival_delays(inp)
    return np.maximum(delays[pairs[:, 0]], delays[pairs[:, 1]]).astype(np.int64)


def kslack_set(
    inp: JoinInput, query: JoinQuery, policy: SlackPolicy, truth: PairArray | None = None
) -> JoinRun:
    """The set form of :class:`KSlackJoinReference`."""
    n = len(inp)
    idx = np.arange(n, dtype=np.int64)
    delays = arrival_delays(inp)
    slack = policy.slack(inp, delays)
    m = [stream_max(inp, R), stream_max(inp, S)]
    # F_X moves only at X's own arrivals (a new K for X takes effect at X's next tuple)
    frontier = [running_max(np.where((inp.side == s) & (m[s] > NEG), m[s] - slack[s], NEG)) for s in (R, S)]
    late = np.zeros(n, dtype=bool)
    release = np.full(n, n, dtype=np.int64)
    for side in (R, S):
        mine = idx[inp.side == side]
        late[mine] = inp.ts[mine] < previous(frontier[side])[mine]
        ok = mine[~late[mine]]
        release[ok] = first_reaching(frontier[side], inp.ts[ok], ok)
    pairs = exact_join(inp, query) if truth is None else truth
    kept = sort_pairs(pairs[~late[pairs[:, 0]] & ~late[pairs[:, 1]]])
    emitted_at = np.maximum(release[kept[:, 0]], release[kept[:, 1]])
    # join state: purged once min(F_R, F_S) - w passes the tuple (never before its release)
    purge_level = np.minimum(frontier[R], frontier[S])
    purge_level = np.where(purge_level > NEG, purge_level - query.window_us, NEG)
    buffered = np.zeros((n, 2), dtype=np.int64)
    latency = np.full(n, -1, dtype=np.int64)
    for side in (R, S):
        ok = idx[(inp.side == side) & ~late]
        dies = np.maximum(first_exceeding(purge_level, inp.ts[ok], ok), release[ok])
        dies = np.where(release[ok] >= n, n, dies)
        buffered[:, side] = count_alive(n, ok, dies)
        m_end = np.append(m[side], m[side][-1] if n else NEG)
        latency[ok] = m_end[release[ok]] - m[side][ok]
    return JoinRun(kept, emitted_at, buffered, latency, late)


class KSlackJoinReference:
    """Tuple-at-a-time K-slack reordering per stream followed by an in-order symmetric join."""

    def __init__(
        self, query: JoinQuery, k_us: tuple[int, int] = (0, 0), adaptive_max_delay: bool = False
    ) -> None:
        self.query = query
        self.k = list(k_us)
        self.adaptive = adaptive_max_delay
        self.max_ts: list[int | None] = [None, None]
        self.frontier: list[int | None] = [None, None]
        self.pending: list[list[tuple[int, int, Row]]] = [[], []]  # heaps of (ts, tid, row)
        self.state: list[dict[int, Row]] = [{}, {}]
        self.released_at: dict[int, int] = {}

    def set_slack(self, side: int, k_us: int) -> None:
        """Set K for one stream (AQ-K-slack); the frontier never moves back."""
        self.k[side] = k_us

    def process(
        self, step: int, tid: int, side: int, ts: int, x: float, y: float, key: int = 0
    ) -> tuple[list[tuple[int, int]], bool]:
        """Handle one arrival at ``step``; return (pairs emitted now, whether t was late)."""
        prev = self.max_ts[side]
        delay = max(prev - ts, 0) if prev is not None else 0
        if self.adaptive:
            self.k[side] = max(self.k[side], delay)
        f = self.frontier[side]
        late = f is not None and ts < f
        mx = ts if prev is None else max(prev, ts)
        self.max_ts[side] = mx
        if not late:
            heapq.heappush(self.pending[side], (ts, tid, (ts, x, y, key)))
        cand = mx - self.k[side]
        self.frontier[side] = cand if f is None else max(f, cand)
        out = self._release(step, side, self.frontier[side])
        self._purge()
        return out, late

    def flush(self, step: int) -> list[tuple[int, int]]:
        """End of stream: release everything still buffered."""
        return self._release(step, R, None) + self._release(step, S, None)

    def _release(self, step: int, side: int, upto: int | None) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        heap = self.pending[side]
        other = S if side == R else R
        while heap and (upto is None or heap[0][0] <= upto):
            _, tid, row = heapq.heappop(heap)
            self.released_at[tid] = step
            for oid, orow in self.state[other].items():
                if self.query.matches(row, orow):
                    out.append((tid, oid) if side == R else (oid, tid))
            self.state[side][tid] = row
        return out

    def _purge(self) -> None:
        f_r, f_s = self.frontier
        if f_r is None or f_s is None:
            return
        level = min(f_r, f_s) - self.query.window_us
        for s in (R, S):
            self.state[s] = {k: v for k, v in self.state[s].items() if v[0] >= level}

    def buffered(self) -> tuple[int, int]:
        """Tuples held per stream (waiting in the reorder buffer or in the join state)."""
        return (len(self.pending[R]) + len(self.state[R]), len(self.pending[S]) + len(self.state[S]))

    def snapshot(self) -> dict[str, Any]:
        """Slack, maxima, frontiers, the reorder buffers and the join state, as plain data.

        ``released_at`` (when each tuple left the reorder buffer, for the latency metric) is not
        part of it: it grows with the stream and the operator's output does not depend on it.
        """
        return {
            "k": list(self.k),
            "adaptive": self.adaptive,
            "max_ts": list(self.max_ts),
            "frontier": list(self.frontier),
            "pending": [[[ts, tid, list(row)] for ts, tid, row in heap] for heap in self.pending],
            "state": [[[tid, list(row)] for tid, row in side.items()] for side in self.state],
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` (the query is this operator's)."""

        def row(r: Sequence[Any]) -> Row:
            return (int(r[0]), float(r[1]), float(r[2]), int(r[3]))

        try:
            self.k = [int(k) for k in snapshot["k"]]
            self.adaptive = bool(snapshot["adaptive"])
            self.max_ts = [None if m is None else int(m) for m in snapshot["max_ts"]]
            self.frontier = [None if f is None else int(f) for f in snapshot["frontier"]]
            self.pending = [
                [(int(ts), int(tid), row(r)) for ts, tid, r in heap] for heap in snapshot["pending"]
            ]
            self.state = [{int(tid): row(r) for tid, r in side} for side in snapshot["state"]]
        except (KeyError, TypeError, ValueError, IndexError) as e:
            msg = f"not a K-slack join snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e
        for heap in self.pending:
            heapq.heapify(heap)


class KSlackJoin:
    """K-slack per stream, then an in-order symmetric join, as a streaming operator.

    ``k_us`` is the slack per stream (K-slack); ``max_delay=True`` grows it to the largest delay
    seen (MP-K-slack). Pairs are emitted when the second of their tuples leaves its reorder
    buffer; a tuple behind its stream's release frontier is dropped and returned as :class:`Late`.
    :meth:`flush` releases what is still buffered.

    >>> from outoforder.core.joins.query import JoinQuery
    >>> from outoforder.core.protocol import Arrival
    >>> op = KSlackJoin(JoinQuery(window_us=10, theta=1.0), k_us=(20, 20))
    >>> rows = [(0, 100), (1, 100), (0, 130), (1, 130), (0, 95)]
    >>> out = op.process([Arrival(i, ts, side=side) for i, (side, ts) in enumerate(rows)])
    >>> out.emitted, out.late, op.flush().emitted
    ([(0, 1)], [Late(id=4, ts=95, window=None)], [(2, 3)])
    """

    def __init__(self, query: JoinQuery, k_us: tuple[int, int] = (0, 0), max_delay: bool = False) -> None:
        self.query = query
        self._op = KSlackJoinReference(query, k_us, adaptive_max_delay=max_delay)
        self.index = 0

    def set_slack(self, side: int, k_us: int) -> None:
        """Set K for one stream (an adaptation); the frontier never moves back."""
        self._op.set_slack(side, k_us)

    def process(self, batch: Sequence[Arrival]) -> Output[tuple[int, int]]:
        """Reorder each arrival through its stream's buffer; (r id, s id) pairs in emission order."""
        out: Output[tuple[int, int]] = Output()
        for a in batch:
            pairs, late = self._op.process(self.index, a.id, a.side, a.ts, a.x, a.y, a.key)
            out.emitted.extend(pairs)
            if late:
                out.late.append(Late(a.id, a.ts))
            self.index += 1
        return out

    def flush(self) -> Output[tuple[int, int]]:
        """The end of the stream: release both reorder buffers."""
        return Output(self._op.flush(self.index))

    def buffered(self) -> tuple[int, int]:
        """Tuples held per stream (reorder buffer and join state)."""
        return self._op.buffered()

    def snapshot(self) -> dict[str, Any]:
        """The reference's state and the arrival count, as plain data."""
        return {"index": self.index, "join": self._op.snapshot()}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a K-slack join with the same query."""
        try:
            self.index = int(snapshot["index"])
            join = snapshot["join"]
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a K-slack join snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e
        self._op.restore(join)


def run_kslack_reference(inp: JoinInput, query: JoinQuery, policy: SlackPolicy) -> JoinRun:
    """Drive :class:`KSlackJoinReference` over an arrival sequence (tests, small data)."""
    n = len(inp)
    adaptive = isinstance(policy, MaxDelayK)
    sched = None if adaptive else policy.slack(inp, np.zeros(n, dtype=np.int64))
    op = KSlackJoinReference(query, (0, 0), adaptive_max_delay=adaptive)
    pairs: list[tuple[int, int]] = []
    emitted: list[int] = []
    late = np.zeros(n, dtype=bool)
    buffered = np.zeros((n, 2), dtype=np.int64)
    for i in range(n):
        if sched is not None:
            op.set_slack(R, int(sched[0][i]))
            op.set_slack(S, int(sched[1][i]))
        ts, x, y, key = inp.row(i)
        out, late[i] = op.process(i, i, int(inp.side[i]), ts, x, y, key)
        pairs += out
        emitted += [i] * len(out)
        buffered[i] = op.buffered()
    out = op.flush(n)
    pairs += out
    emitted += [n] * len(out)
    m = [stream_max(inp, R), stream_max(inp, S)]
    latency = np.full(n, -1, dtype=np.int64)
    for tid, step in op.released_at.items():
        side = int(inp.side[tid])
        at = m[side][min(step, n - 1)]
        latency[tid] = at - m[side][tid]
    p = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    order = np.lexsort((p[:, 1], p[:, 0]))
    return JoinRun(p[order], np.array(emitted, dtype=np.int64)[order], buffered, latency, late)
