"""QJoin: the quality-driven symmetric join (Wei et al., Guangxi Sciences 27(3), 2020; docs/operators.md).

Semantics (with the window made explicit). Streams R (0) and S (1); per-stream
maxima M_X; progress T = min(M_R, M_S) once both streams have a tuple; retention d_X in force at
each arrival; horizon H_X = running max of (T - w - d_X), so it never moves back when d_X is
lowered. On the arrival of t in X (Y the other stream):

1. M_X <- max(M_X, t.ts); recompute T; update H_R, H_S; purge buffered tuples with ts < H;
2. join t with every y in Y's buffer (|t.ts - y.ts| <= w and the predicate); emit at once;
3. store t in X's buffer if t.ts >= H_X.

The paper expires ``x.ts <= T - d`` and sizes the buffer as ``(d + w)·V``, i.e. d counts beyond
the window; we write the window explicitly so that d = 0 loses nothing on in-order streams.

Set form: a true pair (a, b) where a arrives first, on side X, is emitted at b's arrival iff
``a.ts >= H_X(b)``; H is a prefix maximum, so every pair is decided by one comparison after the
exact band join (:func:`qjoin_set`).

>>> from outoforder.core.joins.query import JoinInput, JoinQuery
>>> q = JoinQuery(window_us=10, theta=1.0)
>>> op = QJoinReference(q, retention_us=(0, 0))
>>> [op.process(i, *row) for i, row in enumerate([(0, 100, 0, 0), (1, 105, 0, 0), (1, 90, 0, 0)])]
[[], [(0, 1)], [(0, 2)]]

:class:`QJoin` is the same operator with the streaming protocol (:mod:`outoforder.core.protocol`):
batches of arrivals in, pairs and late arrivals out.

>>> from outoforder.core.protocol import Arrival
>>> op = QJoin(q)
>>> op.process([Arrival(0, 100, side=0), Arrival(1, 105, side=1), Arrival(2, 130, side=0)]).emitted
[(0, 1)]
>>> out = op.process([Arrival(3, 90, side=1)])  # behind S's horizon (95): joined, but not kept
>>> out.emitted, out.late
([(0, 3)], [Late(id=3, ts=90, window=None)])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import (
    NEG,
    count_alive,
    first_exceeding,
    joint_progress,
    running_max,
)
from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, R, S, exact_join, sort_pairs
from outoforder.core.protocol import Arrival, Late, Output
from outoforder.errors import StateError

IntArray = npt.NDArray[np.int64]
Row = tuple[int, float, float, int]


class QJoinReference:
    """Tuple-at-a-time QJoin with per-stream retention, literally as the paper describes it."""

    def __init__(
        self, query: JoinQuery, retention_us: tuple[int, int], state: dict[str, Any] | None = None
    ) -> None:
        self.query = query
        self.retention = list(retention_us)
        self.max_ts: list[int | None] = [None, None]
        self.horizon: list[int | None] = [None, None]
        self.buffers: list[dict[int, Row]] = [{}, {}]
        if state is not None:
            self.retention = list(state["retention"])
            self.max_ts = list(state["max_ts"])
            self.horizon = list(state["horizon"])
            self.buffers = [{int(k): tuple(v) for k, v in b.items()} for b in state["buffers"]]

    def set_retention(self, side: int, retention_us: int) -> None:
        """Change d for one stream (takes effect at the next arrival; the horizon never moves back)."""
        self.retention[side] = retention_us

    def process(
        self, tid: int, side: int, ts: int, x: float, y: float, key: int = 0
    ) -> list[tuple[int, int]]:
        """Handle one arrival; return the (r, s) pairs emitted now."""
        other = S if side == R else R
        prev = self.max_ts[side]
        self.max_ts[side] = ts if prev is None else max(prev, ts)
        m_r, m_s = self.max_ts
        if m_r is not None and m_s is not None:
            progress = min(m_r, m_s)
            for s in (R, S):
                h = progress - self.query.window_us - self.retention[s]
                cur = self.horizon[s]
                hs = h if cur is None else max(cur, h)
                self.horizon[s] = hs
                self.buffers[s] = {k: v for k, v in self.buffers[s].items() if v[0] >= hs}
        row: Row = (ts, x, y, key)
        out = []
        for oid, orow in self.buffers[other].items():
            if self.query.matches(row, orow):
                out.append((tid, oid) if side == R else (oid, tid))
        h_own = self.horizon[side]
        if h_own is None or ts >= h_own:
            self.buffers[side][tid] = row
        return sorted(out)

    def buffered(self) -> tuple[int, int]:
        """Tuples held per stream right now."""
        return len(self.buffers[R]), len(self.buffers[S])

    def snapshot(self) -> dict[str, Any]:
        """Plain-data state for persisting between micro-batches (restore with ``state=``)."""
        return {
            "retention": list(self.retention),
            "max_ts": list(self.max_ts),
            "horizon": list(self.horizon),
            "buffers": [{str(k): list(v) for k, v in b.items()} for b in self.buffers],
        }


class QJoin:
    """QJoin with per-stream retention ``(d_R, d_S)`` (µs), as a streaming operator.

    Emits each pair at once, when the later of its two tuples arrives; an arrival behind its own
    stream's horizon is still joined but not kept, and is returned as :class:`Late`.
    :meth:`set_retention` changes d (an adaptation) from the next arrival on.
    """

    def __init__(self, query: JoinQuery, retention_us: tuple[int, int] = (0, 0)) -> None:
        self.query = query
        self._op = QJoinReference(query, retention_us)

    def set_retention(self, side: int, retention_us: int) -> None:
        """Change d for one stream (takes effect at the next arrival; the horizon never moves back)."""
        self._op.set_retention(side, retention_us)

    def process(self, batch: Sequence[Arrival]) -> Output[tuple[int, int]]:
        """Join each arrival with the other stream's buffer; (r id, s id) pairs in emission order."""
        out: Output[tuple[int, int]] = Output()
        for a in batch:
            out.emitted.extend(self._op.process(a.id, a.side, a.ts, a.x, a.y, a.key))
            h = self._op.horizon[a.side]
            if h is not None and a.ts < h:
                out.late.append(Late(a.id, a.ts))
        return out

    def flush(self) -> Output[tuple[int, int]]:
        """Nothing is held back: QJoin emits at once."""
        return Output()

    def buffered(self) -> tuple[int, int]:
        """Tuples held per stream right now (the memory measure)."""
        return self._op.buffered()

    def snapshot(self) -> dict[str, Any]:
        """Retention, maxima, horizons and buffers as plain data."""
        return self._op.snapshot()

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a QJoin with the same query."""
        try:
            self._op = QJoinReference(self.query, (0, 0), state=dict(snapshot))
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a QJoin snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e


@dataclass(frozen=True)
class JoinRun:
    """What an operator did over an arrival sequence.

    ``pairs`` (sorted (r, s)) with ``emitted_at`` (arrival index at which each pair was emitted;
    ``len(input)`` means at the final flush); ``buffered`` per stream after each arrival (shape
    (n, 2)); ``latency`` per arrival in stream-progress µs (-1 for tuples dropped as late);
    ``late`` marks tuples an operator dropped.
    """

    pairs: PairArray
    emitted_at: IntArray
    buffered: IntArray
    latency: IntArray
    late: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))


def horizons(inp: JoinInput, query: JoinQuery, retention_r: IntArray, retention_s: IntArray) -> IntArray:
    """H_X(i) for both streams, shape (2, n): running max of T - w - d_X (NEG until T exists)."""
    t = joint_progress(inp)
    valid = t > NEG
    out = np.empty((2, len(inp)), dtype=np.int64)
    for side, d in ((R, retention_r), (S, retention_s)):
        out[side] = running_max(np.where(valid, t - query.window_us - d, NEG))
    return out


def qjoin_set(
    inp: JoinInput,
    query: JoinQuery,
    retention_r: IntArray | int,
    retention_s: IntArray | int,
    truth: PairArray | None = None,
) -> JoinRun:
    """The set form of :class:`QJoinReference` over a whole arrival sequence.

    ``retention_*`` is a constant or the d in force at each arrival.
    """
    n = len(inp)
    d_r = np.broadcast_to(np.asarray(retention_r, dtype=np.int64), (n,))
    d_s = np.broadcast_to(np.asarray(retention_s, dtype=np.int64), (n,))
    h = horizons(inp, query, d_r, d_s)
    pairs = exact_join(inp, query) if truth is None else truth
    earlier = pairs.min(axis=1)
    later = pairs.max(axis=1)
    keep = inp.ts[earlier] >= h[inp.side[earlier], later]
    kept = sort_pairs(pairs[keep])
    emitted_at = kept.max(axis=1)
    idx = np.arange(n, dtype=np.int64)
    buffered = np.zeros((n, 2), dtype=np.int64)
    for side in (R, S):
        mine = idx[inp.side == side]
        dies = first_exceeding(h[side], inp.ts[mine], mine)  # purged when H > ts
        buffered[:, side] = count_alive(n, mine, dies)
    return JoinRun(kept, emitted_at, buffered, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool))


def run_reference(
    inp: JoinInput, query: JoinQuery, retention_r: IntArray | int, retention_s: IntArray | int
) -> JoinRun:
    """Drive :class:`QJoinReference` over an arrival sequence (for tests and small data)."""
    n = len(inp)
    d_r = np.broadcast_to(np.asarray(retention_r, dtype=np.int64), (n,))
    d_s = np.broadcast_to(np.asarray(retention_s, dtype=np.int64), (n,))
    op = QJoinReference(query, (int(d_r[0]) if n else 0, int(d_s[0]) if n else 0))
    pairs: list[tuple[int, int]] = []
    emitted: list[int] = []
    buffered = np.zeros((n, 2), dtype=np.int64)
    for i in range(n):
        op.set_retention(R, int(d_r[i]))
        op.set_retention(S, int(d_s[i]))
        ts, x, y, key = inp.row(i)
        out = op.process(i, int(inp.side[i]), ts, x, y, key)
        pairs += out
        emitted += [i] * len(out)
        buffered[i] = op.buffered()
    p = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    order = np.lexsort((p[:, 1], p[:, 0]))
    return JoinRun(
        p[order],
        np.array(emitted, dtype=np.int64)[order],
        buffered,
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=bool),
    )
