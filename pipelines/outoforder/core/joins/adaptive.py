"""QJoin adapting its retention every L of stream progress, over batches of any size.

:class:`AdaptiveQJoin` is the stream join as the pipeline runs it: the set form of QJoin
(:func:`~outoforder.core.joins.qjoin.qjoin_set`) over a batch of arrivals at a time, its state
carried from batch to batch, and the retention (d_R, d_S) decided *inside* the batches at the
controller's own cadence (:mod:`outoforder.core.joins.adaptation`):

- a decision is made before the first arrival at which the joint progress T reaches the next
  mark ``anchor + k·L`` (the anchor is the first T of the stream), as
  :func:`~outoforder.core.joins.adaptation.adaptation_points` places them;
- it sees the arrivals whose progress lies within :data:`HISTORY_PERIODS` periods of the newest,
  the exact join among them and which of those pairs the join produced, and the needs the
  earlier decisions measured (the robust estimator's memory);
- so every decision, every result pair and the state after the last arrival are the same however
  the arrivals are cut into batches: one batch of a day or one per arrival. The tests hold them
  together over random cuts, with snapshots taken and restored between batches.

The state is what the next batch needs: the stream maxima, horizons and retention, the marks, the
remembered needs, and the *kept* arrivals: those still buffered (``ts >= H`` of their stream) and
those a later decision still looks at (progress within the history), with each one's progress,
delay and the horizon its partners were judged by.

>>> from outoforder.core.joins.adaptation import AdaptationSettings
>>> from outoforder.core.joins.query import JoinInput, JoinQuery
>>> q = JoinQuery(window_us=10, theta=1.0)
>>> st = AdaptationSettings(period_us=100, interval_us=20, granularity_us=5, basic_window_us=5)
>>> op = AdaptiveQJoin(q, st, initial_us=(50, 50))
>>> inp = JoinInput.from_rows([(0, 10), (1, 12), (0, 30), (1, 5), (1, 60), (0, 58)])
>>> out = op.process(np.arange(6), inp)
>>> out.pairs.tolist(), [d.at_index for d in out.decisions]
([[0, 1], [0, 3], [5, 4]], [4, 5])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.adaptation import (
    MEASURED_PERIODS,
    Adaptation,
    AdaptationSettings,
    decide_at,
)
from outoforder.core.joins.progress import NEG, running_max
from outoforder.core.joins.qjoin import JoinRun, qjoin_set
from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, R, S, exact_join
from outoforder.errors import ConfigError, StateError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

HISTORY_PERIODS = MEASURED_PERIODS + 1  # the progress a decision looks back over, in periods
INITIAL_VERSION = -1  # the retention before the first decision
# the kept arrivals' columns: the input, then progress T after the arrival, its delay on its own
# stream, and the horizon of the other stream its pairs were judged by (H of the partner's side)
ROW_COLUMNS = ("seq", "side", "ts", "x", "y", "key", "t", "delay", "h_partner")
_FLOATS = ("x", "y")


def _empty_rows() -> dict[str, npt.NDArray[Any]]:
    return {c: np.zeros(0, np.float64 if c in _FLOATS else np.int64) for c in ROW_COLUMNS}


@dataclass
class AdaptiveState:
    """What :class:`AdaptiveQJoin` carries from one batch to the next (see the module docstring).

    ``version`` names the retention in force: the id of the arrival from which its decision
    holds (:data:`INITIAL_VERSION` before the first). ``needs`` are the (progress, measured
    need) of earlier decisions the robust estimator still remembers.
    """

    m: tuple[int, int] = (NEG, NEG)
    h: tuple[int, int] = (NEG, NEG)
    d: tuple[int, int] = (0, 0)
    version: int = INITIAL_VERSION
    anchor_us: int | None = None
    next_mark_us: int | None = None
    needs: tuple[tuple[int, int], ...] = ()
    decisions: int = 0
    rows: dict[str, npt.NDArray[Any]] = field(default_factory=_empty_rows)

    def scalars(self) -> dict[str, Any]:
        """Everything but the kept arrivals, as plain (JSON-able) data."""
        return {
            "m": list(self.m),
            "h": list(self.h),
            "d": list(self.d),
            "version": self.version,
            "anchor_us": self.anchor_us,
            "next_mark_us": self.next_mark_us,
            "needs": [list(n) for n in self.needs],
            "decisions": self.decisions,
        }

    @classmethod
    def of(
        cls, scalars: Mapping[str, Any], rows: Mapping[str, Sequence[Any] | npt.NDArray[Any]]
    ) -> AdaptiveState:
        """From :meth:`scalars` and the kept arrivals' columns (:data:`ROW_COLUMNS`), in any row order."""
        try:
            cols = {
                c: np.asarray(rows[c], dtype=np.float64 if c in _FLOATS else np.int64) for c in ROW_COLUMNS
            }
            order = np.argsort(cols["seq"], kind="stable")
            anchor, mark = scalars["anchor_us"], scalars["next_mark_us"]
            return cls(
                m=(int(scalars["m"][0]), int(scalars["m"][1])),
                h=(int(scalars["h"][0]), int(scalars["h"][1])),
                d=(int(scalars["d"][0]), int(scalars["d"][1])),
                version=int(scalars["version"]),
                anchor_us=None if anchor is None else int(anchor),
                next_mark_us=None if mark is None else int(mark),
                needs=tuple((int(p), int(n)) for p, n in scalars["needs"]),
                decisions=int(scalars["decisions"]),
                rows={c: v[order] for c, v in cols.items()},
            )
        except (KeyError, TypeError, ValueError, IndexError) as e:
            msg = f"not an adaptive join state ({type(e).__name__}: {e})"
            raise StateError(msg) from e

    @property
    def kept(self) -> int:
        """Arrivals carried (buffered, or in a later decision's history)."""
        return int(self.rows["seq"].size)

    def buffered(self) -> tuple[int, int]:
        """Tuples in each stream's buffer (``ts >= H``): the join's memory."""
        side, ts = self.rows["side"], self.rows["ts"]
        return int(((side == R) & (ts >= self.h[R])).sum()), int(((side == S) & (ts >= self.h[S])).sum())


@dataclass(frozen=True)
class PassOutput:
    """What one batch produced.

    ``pairs`` are (r id, s id) with their event times, each with the id of the arrival that emitted
    it (the later one),
    the retention in force then and its version; ``late`` the ids of the batch's arrivals behind
    their own stream's horizon (joined, not kept); ``d_r``/``d_s`` the retention in force at each
    arrival of the batch; ``decisions`` the controller's, ``at_index`` being the id of the arrival
    from which each holds.
    """

    pairs: PairArray
    pair_ts: IntArray  # shape (n, 2): r.ts, s.ts
    emitted_at: IntArray
    pair_d: IntArray  # shape (n, 2): d_R, d_S in force at emission
    pair_version: IntArray
    late: IntArray
    d_r: IntArray
    d_s: IntArray
    decisions: list[Adaptation]


class AdaptiveQJoin:
    """QJoin with its retention adapted every L, one batch of arrivals at a time (module docstring).

    ``initial_us`` is (d_R, d_S) before the first decision.
    """

    def __init__(
        self,
        query: JoinQuery,
        settings: AdaptationSettings,
        initial_us: tuple[int, int] | None = None,
        state: AdaptiveState | None = None,
    ) -> None:
        self.query = query
        self.settings = settings
        init = (settings.initial_us, settings.initial_us) if initial_us is None else initial_us
        if min(init) < 0:
            msg = f"the initial retention must be >= 0 µs, got {init}"
            raise ConfigError(msg)
        self.state = AdaptiveState(d=(int(init[0]), int(init[1]))) if state is None else state

    @property
    def history_us(self) -> int:
        """The progress a decision looks back over."""
        return HISTORY_PERIODS * self.settings.period_us

    def process(self, ids: IntArray, batch: JoinInput) -> PassOutput:
        """Join a batch of arrivals (``ids`` increasing, after every id seen before), adapting as it goes."""
        ids = np.asarray(ids, dtype=np.int64)
        n_new = len(batch)
        if ids.size != n_new:
            msg = f"{ids.size} ids for {n_new} arrivals"
            raise ConfigError(msg)
        st, q = self.state, self.query
        old = st.rows
        if n_new and (np.any(np.diff(ids) <= 0) or (old["seq"].size and ids[0] <= old["seq"][-1])):
            msg = "arrival ids must increase, and follow the ids already processed"
            raise ConfigError(msg)
        n_old = int(old["seq"].size)
        n = n_old + n_new
        # progress and delays of the batch, carried from the maxima so far
        m_before = np.empty((2, n_new), dtype=np.int64)
        m_after = np.empty((2, n_new), dtype=np.int64)
        for side in (R, S):
            after = np.maximum(running_max(np.where(batch.side == side, batch.ts, NEG)), st.m[side])
            m_after[side] = after
            m_before[side, :1] = st.m[side]
            m_before[side, 1:] = after[:-1]
        own_before = np.where(batch.side == R, m_before[R], m_before[S])
        delay = np.where(own_before > NEG, np.maximum(own_before - batch.ts, 0), 0)
        t_new = np.minimum(m_after[R], m_after[S])
        rows = {
            "seq": np.concatenate([old["seq"], ids]),
            "side": np.concatenate([old["side"], batch.side.astype(np.int64)]),
            "ts": np.concatenate([old["ts"], batch.ts.astype(np.int64)]),
            "x": np.concatenate([old["x"], batch.x.astype(np.float64)]),
            "y": np.concatenate([old["y"], batch.y.astype(np.float64)]),
            "key": np.concatenate([old["key"], batch.key.astype(np.int64)]),
            "t": np.concatenate([old["t"], t_new]),
            "delay": np.concatenate([old["delay"], delay]),
            "h_partner": np.concatenate([old["h_partner"], np.full(n_new, NEG, np.int64)]),
        }
        inp = JoinInput(rows["side"], rows["ts"], rows["x"], rows["y"], rows["key"])
        t = rows["t"]
        pairs = exact_join(inp, q) if n_new else np.zeros((0, 2), np.int64)
        earlier, later = pairs.min(axis=1), pairs.max(axis=1)
        # the pairs by (later, r, s): a decision's pairs are a range of them (then filtered)
        by_later = np.argsort(later, kind="stable")
        pairs, earlier, later = pairs[by_later], earlier[by_later], later[by_later]
        h_partner = rows["h_partner"]
        h_carry = [st.h[R], st.h[S]]
        d = [st.d[R], st.d[S]]
        version = st.version
        anchor, mark = st.anchor_us, st.next_mark_us
        needs = list(st.needs)
        count = st.decisions
        d_r = np.empty(n_new, np.int64)
        d_s = np.empty(n_new, np.int64)
        ver = np.empty(n_new, np.int64)
        kept_own = np.zeros(n_new, dtype=bool)
        decisions: list[Adaptation] = []
        pos = n_old
        interval = self.settings.interval_us
        while pos < n:
            if anchor is None:  # the first joint progress anchors the marks
                valid = np.flatnonzero(t[pos:] > NEG)
                if valid.size:
                    anchor = int(t[pos + valid[0]])
                    mark = anchor + interval
            if anchor is not None and mark is not None and t[pos] >= mark:  # a decision before this arrival
                step = self._decide(rows, inp, pairs, earlier, later, h_partner, pos, anchor, needs)
                d = [step.d_r_us, step.d_s_us]
                version = int(rows["seq"][pos])
                side_b, ts_b = rows["side"][:pos], rows["ts"][:pos]
                held = {  # the memory when deciding: tuples buffered before this arrival
                    "buffered_r": int(((side_b == R) & (ts_b >= h_carry[R])).sum()),
                    "buffered_s": int(((side_b == S) & (ts_b >= h_carry[S])).sum()),
                }
                decisions.append(_with_id(step, version, held))
                count += 1
                if "measured_need_us" in step.stats:
                    needs.append((step.progress_us, int(step.stats["measured_need_us"])))
                mark = anchor + ((int(t[pos]) - anchor) // interval + 1) * interval
            # the segment under this retention: up to the arrival that reaches the next mark
            stop = n if mark is None else pos + 1 + int(np.searchsorted(t[pos + 1 :], mark, side="left"))
            seg = slice(pos, stop)
            seg_t = t[seg]
            valid_t = seg_t > NEG
            h = [
                np.maximum(running_max(np.where(valid_t, seg_t - q.window_us - d[side], NEG)), h_carry[side])
                for side in (R, S)
            ]
            side_seg = rows["side"][seg]
            h_partner[seg] = np.where(side_seg == R, h[S], h[R])
            i, j = pos - n_old, stop - n_old
            kept_own[i:j] = rows["ts"][seg] >= np.where(side_seg == R, h[R], h[S])
            h_carry = [int(h[R][-1]), int(h[S][-1])]
            d_r[i:j], d_s[i:j], ver[i:j] = d[R], d[S], version
            pos = stop
        # the batch's emissions: pairs completed by one of its arrivals, the earlier still buffered
        new = later >= n_old
        made = new & (inp.ts[earlier] >= h_partner[later])
        em_l = later[made]
        out_pairs = np.column_stack([rows["seq"][pairs[made, 0]], rows["seq"][pairs[made, 1]]])
        order = np.lexsort((out_pairs[:, 1], out_pairs[:, 0])) if out_pairs.size else np.zeros(0, np.int64)
        at = em_l - n_old
        result = PassOutput(
            pairs=out_pairs[order],
            pair_ts=np.column_stack([rows["ts"][pairs[made, 0]], rows["ts"][pairs[made, 1]]])[order],
            emitted_at=rows["seq"][em_l][order],
            pair_d=np.column_stack([d_r[at], d_s[at]])[order],
            pair_version=ver[at][order],
            late=ids[~kept_own],
            d_r=d_r,
            d_s=d_s,
            decisions=decisions,
        )
        # what the next batch needs: buffered tuples, and the arrivals a later decision looks at
        t_last = int(t[-1]) if n else NEG
        h_now = np.where(rows["side"] == R, h_carry[R], h_carry[S])
        keep = (t > t_last - self.history_us) | (rows["ts"] >= h_now)
        if anchor is not None and needs:
            oldest = t_last - self.settings.memory_periods * self.settings.period_us
            needs = [(p, v) for p, v in needs if p >= oldest]
        m_last = (int(m_after[R][-1]), int(m_after[S][-1])) if n_new else st.m
        self.state = AdaptiveState(
            m=m_last,
            h=(h_carry[R], h_carry[S]),
            d=(d[R], d[S]),
            version=version,
            anchor_us=anchor,
            next_mark_us=mark,
            needs=tuple(needs),
            decisions=count,
            rows={c: v[keep] for c, v in rows.items()},
        )
        return result

    def _decide(
        self,
        rows: Mapping[str, npt.NDArray[Any]],
        inp: JoinInput,
        pairs: PairArray,
        earlier: IntArray,
        later: IntArray,
        h_partner: IntArray,
        at: int,
        anchor: int,
        needs: Sequence[tuple[int, int]],
    ) -> Adaptation:
        """The decision before arrival ``at`` (a row index) from the history it sees."""
        t = rows["t"]
        now = int(t[at - 1])
        lo = int(np.searchsorted(t[:at], now - self.history_us, side="right"))
        a, b = np.searchsorted(later, [lo, at], side="left")
        mine = np.arange(a, b)[earlier[a:b] >= lo]
        window = JoinInput(inp.side[lo:at], inp.ts[lo:at], inp.x[lo:at], inp.y[lo:at], inp.key[lo:at])
        produced = inp.ts[earlier[mine]] >= h_partner[later[mine]]
        return decide_at(
            window,
            self.query,
            self.settings,
            pairs[mine] - lo,
            t[lo:at],
            rows["delay"][lo:at],
            produced,
            needs,
            anchor,
        )


def _with_id(step: Adaptation, arrival_id: int, more: Mapping[str, int]) -> Adaptation:
    stats = {**step.stats, **more}
    return Adaptation(
        arrival_id, step.progress_us, step.q_l, step.d_r_us, step.d_s_us, step.estimated_q, stats
    )


def run_adaptive_qjoin(
    inp: JoinInput, query: JoinQuery, settings: AdaptationSettings, truth: PairArray | None = None
) -> tuple[JoinRun, list[Adaptation]]:
    """QJoin with its retention adapted every L over one arrival sequence (ids = arrival indices).

    :class:`AdaptiveQJoin` in one batch; the run is QJoin's set form under the retention schedule
    the controller chose (with the memory and latency measures of :func:`qjoin_set`).
    """
    op = AdaptiveQJoin(query, settings)
    out = op.process(np.arange(len(inp), dtype=np.int64), inp)
    return qjoin_set(inp, query, out.d_r, out.d_s, truth), out.decisions
