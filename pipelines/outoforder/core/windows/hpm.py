"""HPM: sliding-window aggregates over an out-of-order stream with a buffer that meets an (ε, δ) target.

The incremental operator of HPM's stream module (Yang et al., Guangxi Sciences 26(4), 2019; the
PD-controlled buffer K = α·k; docs/operators.md), tuple at a time, with the protocol of
:mod:`outoforder.core.protocol`. The buffer policy is pluggable:
:class:`~outoforder.core.windows.slack.HPMSlack` is HPM's, and the K-slack family
(:class:`~outoforder.core.windows.slack.FixedSlack`, ``MaxDelaySlack``, ``AQSlack``) are the
baselines. State: ``t_max`` (largest event time seen), ``k`` (largest delay seen) and the *close
frontier* ``C``, the running maximum of ``t_max − K``: a window whose end is at or before ``C``
is closed and emitted, and ``C`` never moves back, so a growing K never reopens a window.

On the arrival of a tuple ``(ts, v)``:

1. its delay ``t_max − ts`` (0 if on time) is shown to the policy and ``k`` grows to it;
2. for each window containing ``ts``: if it is already closed the membership is *late* and is
   returned as a :class:`~outoforder.core.protocol.Late` item (HPM's class 3, and class 2 for the
   closed windows of a class-2 tuple: a repair needs every late membership to make the results
   exact); otherwise ``v`` joins the window. Either way the membership's lateness ``t_max − end``
   (before the arrival) and value are counted in the window's lateness profile
   (:mod:`outoforder.core.windows.lateness`), late ones until the coverage is observed;
3. ``t_max`` moves to ``ts`` if ahead; ``K = policy.slack(k)``; ``C = max(C, t_max − K)``;
4. every window that ``C`` now passes is emitted, in window order, with the aggregate of the
   tuples it received, its count, the K in force and ``λ_thr`` from its received values
   (:mod:`outoforder.core.windows.quality`). Windows that received nothing are not emitted;
5. a closed window's coverage ``λ = n_rcv / (n_rcv + n_late)`` is *observed* once ``C`` passes
   its end by the coverage horizon ``H`` (late tuples that come later are not counted, as in HPM:
   "within a period after the close"), with the K it needed (read off its lateness profile);
   the observation goes to the policy (the PD controller), and so does what each window still
   watched needs so far (its unsettled evidence: the lateness policy reacts to it before the
   windows settle),
   after every arrival (``control="arrival"``) or at the end of each batch (``control="batch"``:
   how the pipeline's per-interval stage runs, one batch per interval; then, and only then, the
   adaptation cadence depends on the batches). Under ``"batch"`` control a policy that follows
   unsettled evidence first sees what the watched windows need with the batch's own members
   counted (:meth:`HPM._foresee`): a window closed before the batch stays closed under any K, so
   the K fixed for the batch already answers the late arrivals it brings.

:meth:`HPM.flush` emits the still-open windows at the end of the stream.

>>> from outoforder.core.protocol import Arrival
>>> from outoforder.core.windows.assign import Windows
>>> from outoforder.core.windows.buffered import WindowQuery
>>> from outoforder.core.windows.slack import FixedSlack
>>> op = HPM(WindowQuery(Windows(100, 50), "sum", coverage_horizon_us=100), FixedSlack(20))
>>> arrivals = [Arrival(i, t, v) for i, (t, v) in enumerate([(10, 1.0), (60, 2.0), (160, 4.0), (30, 8.0)])]
>>> out = op.process(arrivals)
>>> [(e.window_id, e.value) for e in out.emitted], [(x.id, x.window) for x in out.late]
([(-1, 1.0), (0, 3.0)], [(3, -1), (3, 0)])
>>> [(e.window_id, e.value) for e in op.flush().emitted]  # the tuple at ts 30 came too late for both
[(1, 2.0), (2, 4.0), (3, 4.0)]
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any, Literal

import numpy as np

from outoforder.core.joins.progress import NEG
from outoforder.core.protocol import Arrival, Late, Output
from outoforder.core.windows.aggregate import reference_aggregate
from outoforder.core.windows.buffered import BufferedRun, FloatArray, IntArray, WindowQuery, threshold
from outoforder.core.windows.lateness import EDGES, Profiles, needed_slacks, profiles
from outoforder.core.windows.slack import HPMSlack, SlackPolicy
from outoforder.errors import ConfigError, StateError

_EDGES = EDGES.tolist()  # bisect over a list: one membership at a time, no numpy call


@dataclass(frozen=True, slots=True)
class WindowResult:
    """An emitted window: its aggregate over the tuples received in time, and how it was emitted."""

    window_id: int
    value: float
    received: int  # n_rcv
    emitted_at: int  # the arrival index whose frontier closed it (the arrival count at a flush)
    slack_us: int  # K in force
    lag_us: int  # t_max − end at emission: the logical latency
    lambda_thr: float  # the coverage its (ε, δ) target needs


@dataclass(frozen=True, slots=True)
class Observation:
    """A closed window's coverage, observed once the frontier passed its end by the horizon."""

    window_id: int
    at: int  # arrival index
    received: int
    late: int
    lambda_thr: float
    needed_us: int = 0  # the smallest constant K from which on its result would have been within ε
    slack_after_us: int | None = None  # K once the policy has seen it (``"arrival"`` control)

    @property
    def coverage(self) -> float:
        """λ = n_rcv / (n_rcv + n_late)."""
        return self.received / max(self.received + self.late, 1)


@dataclass(frozen=True)
class HPMOutput(Output[WindowResult]):
    """An :class:`~outoforder.core.protocol.Output`, with the coverage observations and K per arrival."""

    observations: list[Observation] = field(default_factory=list)
    slack: list[int] = field(default_factory=list)


class HPM:
    """HPM's buffered sliding-window aggregate (see the module docstring); K-slack with another policy.

    ``policy`` defaults to HPM's PD controller aiming at the query's coverage ``1 − ε``.
    """

    def __init__(
        self,
        query: WindowQuery,
        policy: SlackPolicy | None = None,
        control: Literal["arrival", "batch"] = "arrival",
    ) -> None:
        from outoforder.core.control.pd import PDController

        if control not in ("arrival", "batch"):
            msg = f"control must be 'arrival' or 'batch', got {control!r}"
            raise ConfigError(msg)
        self.query = query
        self.policy: SlackPolicy = policy or HPMSlack(PDController(lambda_thr=1.0 - query.eps))
        self.control = control
        self.index = 0  # arrivals processed
        self.t_max = NEG
        self.k = 0
        self.frontier = NEG
        self.slack_now = 0
        self.closed_upto: int | None = None  # the largest window id whose end is <= frontier
        self.open: dict[int, list[float]] = {}  # window id -> values received in time
        self.open_buckets: dict[int, list[int]] = {}  # window id -> the lateness bucket of each value
        self._open_heap: list[int] = []
        self.watched: dict[int, list[float]] = {}  # closed, coverage not yet observed: [n_rcv, n_late, λ_thr]
        # their lateness profiles: the members counted so far (received, then late)
        self.watched_profile: dict[int, Profiles] = {}
        self._watch_heap: list[int] = []
        # observations the policy has not seen: (λ, λ_thr, K needed)
        self.pending: list[tuple[float, float, int]] = []
        # what each watched window needs so far, for the policy's unsettled evidence (recomputed
        # from the members, so not in the snapshot); whether it changed since the policy saw it
        self._unsettled: dict[int, int] = {}
        self._dirty = True

    # --- the protocol ---------------------------------------------------------------------

    def process(self, batch: Sequence[Arrival]) -> HPMOutput:
        """Handle a batch of arrivals (the policy sees observations per arrival, or at the batch's end)."""
        return self.feed(batch, control=True)

    def feed(self, batch: Sequence[Arrival], control: bool = True) -> HPMOutput:
        """:meth:`process`; ``control=False`` keeps a batch's observations pending (``"batch"`` control)."""
        out = HPMOutput()
        if self.control == "batch" and self.policy.follows_unsettled and self.closed_upto is not None:
            self._foresee(batch)
        for a in batch:
            self._arrive(a, out)
        if self.control == "batch" and control:
            self._observe()
        return out

    def flush(self) -> HPMOutput:
        """The end of the stream: emit every open window with what it received."""
        out = HPMOutput()
        while self._open_heap:
            self._close(heapq.heappop(self._open_heap), self.index, self.slack_now, out)
        return out

    def snapshot(self) -> dict[str, Any]:
        """The state as plain data (the policy's included)."""
        return {
            "index": self.index,
            "t_max": self.t_max,
            "k": self.k,
            "frontier": self.frontier,
            "slack": self.slack_now,
            "closed_upto": self.closed_upto,
            "open": [[w, list(v), list(self.open_buckets[w])] for w, v in self.open.items()],
            "watched": [[w, *v, self.watched_profile[w].sparse()] for w, v in self.watched.items()],
            "pending": [list(p) for p in self.pending],
            "policy": self.policy.snapshot(),
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of an operator with the same query and kind of policy."""
        try:
            self.index, self.t_max, self.k = (
                int(snapshot["index"]),
                int(snapshot["t_max"]),
                int(snapshot["k"]),
            )
            self.frontier, self.slack_now = int(snapshot["frontier"]), int(snapshot["slack"])
            upto = snapshot["closed_upto"]
            self.closed_upto = None if upto is None else int(upto)
            self.open = {int(w): [float(x) for x in v] for w, v, _ in snapshot["open"]}
            self.open_buckets = {int(w): [int(b) for b in bs] for w, _, bs in snapshot["open"]}
            self.watched = {
                int(w): [float(r), float(lt), float(lam)] for w, r, lt, lam, _ in snapshot["watched"]
            }
            self.watched_profile = {int(w): Profiles.from_sparse(p) for w, *_, p in snapshot["watched"]}
            self.pending = [(float(c), float(lam), int(k)) for c, lam, k in snapshot["pending"]]
            self.policy.restore(dict(snapshot["policy"]))
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not an HPM snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e
        self._unsettled, self._dirty = {}, True
        self._open_heap = sorted(self.open)
        self._watch_heap = sorted(self.watched)

    # --- one arrival ------------------------------------------------------------------------

    def _arrive(self, a: Arrival, out: HPMOutput) -> None:
        w, horizon = self.query.windows, self.query.coverage_horizon_us
        t, i = int(a.ts), self.index
        delay = max(self.t_max - t, 0) if self.t_max != NEG else 0
        self.policy.observe_delay(delay)
        self.k = max(self.k, delay)
        for wid in w.ids_of(t).tolist():
            end = wid * w.slide_us + w.size_us
            # the membership's lateness bucket: 0 when the stream had not passed the end (or was empty)
            bucket = 0 if self.t_max == NEG else bisect_right(_EDGES, self.t_max - end)
            value = float(a.value)
            if self.closed_upto is not None and wid <= self.closed_upto:
                out.late.append(Late(a.id, t, wid))
                if wid in self.watched:
                    self.watched[wid][1] += 1
                    self.watched_profile[wid].count(bucket, value)
                    self._unsettled.pop(wid, None)
                    self._dirty = True
                elif end + horizon > self.frontier:
                    # nothing arrived in time: coverage 0 when observed
                    self.watched[wid] = [0, 1, threshold(self.query, [])]
                    self.watched_profile[wid] = Profiles.empty(1)
                    self.watched_profile[wid].count(bucket, value)
                    self._dirty = True
                    heapq.heappush(self._watch_heap, wid)
            else:
                if wid not in self.open:
                    self.open[wid] = []
                    self.open_buckets[wid] = []
                    heapq.heappush(self._open_heap, wid)
                self.open[wid].append(value)
                self.open_buckets[wid].append(bucket)
        self.t_max = max(self.t_max, t)
        self.slack_now = self.policy.slack(self.k)
        out.slack.append(self.slack_now)
        self.frontier = max(self.frontier, self.t_max - self.slack_now)
        self.closed_upto = (self.frontier - w.size_us) // w.slide_us
        while self._open_heap and self._open_heap[0] <= self.closed_upto:
            self._close(heapq.heappop(self._open_heap), i, self.slack_now, out)
        seen = []
        while self._watch_heap and int(w.end_of(self._watch_heap[0])) + horizon <= self.frontier:
            wid = heapq.heappop(self._watch_heap)
            n_rcv, n_late, lam = self.watched.pop(wid)
            needed = self._need(self.watched_profile.pop(wid), lam)
            self._unsettled.pop(wid, None)
            self._dirty = True
            ob = Observation(wid, i, int(n_rcv), int(n_late), lam, needed)
            seen.append(ob)
            self.pending.append((ob.coverage, lam, needed))
        self.index += 1
        if self.control == "arrival":
            self._observe()
            if seen:  # what the policy answers once it has seen them
                after = self.policy.slack(self.k)
                seen = [replace(ob, slack_after_us=after) for ob in seen]
        out.observations.extend(seen)

    def _observe(self) -> None:
        for coverage, lam, needed in self.pending:
            self.policy.observe_window(coverage, lam, needed)
        self.pending.clear()
        if self._dirty and self.policy.follows_unsettled:
            order = sorted(self.watched)
            for wid in order:
                if wid not in self._unsettled:
                    self._unsettled[wid] = self._need(self.watched_profile[wid], self.watched[wid][2])
            self.policy.observe_unsettled([self._unsettled[w] for w in order])
            self._dirty = False

    def _foresee(self, batch: Sequence[Arrival]) -> None:
        """Before a batch: show the policy what the watched windows need with the batch's members counted.

        A window closed before the batch stays closed whatever K the batch gets, and its members'
        lateness buckets come from ``t_max`` before each arrival, which K does not move: so the
        lateness controller can fix the batch's K on them (the frontier as it stands now).
        """
        w, horizon = self.query.windows, self.query.coverage_horizon_us
        counted = {wid: p.take(np.arange(1)) for wid, p in self.watched_profile.items()}
        lam = {wid: row[2] for wid, row in self.watched.items()}
        t_max = self.t_max
        for a in batch:
            t = int(a.ts)
            for wid in w.ids_of(t).tolist():
                end = wid * w.slide_us + w.size_us
                if self.closed_upto is not None and wid <= self.closed_upto and end + horizon > self.frontier:
                    if wid not in counted:
                        counted[wid], lam[wid] = Profiles.empty(1), threshold(self.query, [])
                    bucket = 0 if t_max == NEG else bisect_right(_EDGES, t_max - end)
                    counted[wid].count(bucket, float(a.value))
            t_max = max(t_max, t)
        self.policy.observe_unsettled([self._need(counted[wid], lam[wid]) for wid in sorted(counted)])
        self._dirty = True  # the batch's end shows the policy what the windows need after all

    def _need(self, profile: Profiles, lam: float) -> int:
        """The K a window needs, on the members counted so far (:mod:`outoforder.core.windows.lateness`)."""
        q = self.query
        return int(needed_slacks(profile, q.aggregate, q.eps, np.array([lam]))[0])

    def _close(self, wid: int, at: int, slack: int, out: HPMOutput) -> None:
        vals = self.open.pop(wid)
        buckets = self.open_buckets.pop(wid)
        self.watched_profile[wid] = profiles(
            np.zeros(len(vals), np.int64), np.array(buckets, np.int64), np.array(vals, np.float64), 1
        )
        self._dirty = True
        lam = threshold(self.query, vals)
        end = int(self.query.windows.end_of(wid))
        value = reference_aggregate(vals, self.query.aggregate)
        out.emitted.append(WindowResult(wid, value, len(vals), at, slack, self.t_max - end, lam))
        self.watched[wid] = [len(vals), 0, lam]
        heapq.heappush(self._watch_heap, wid)


def buffered_reference(
    ts: Sequence[int] | IntArray,
    values: Sequence[float] | FloatArray,
    query: WindowQuery,
    policy: SlackPolicy,
    control_points: Sequence[int] | None = None,
    flush: bool = True,
) -> BufferedRun:
    """The operator, literally, one arrival at a time (tuples in arrival order).

    Drives :class:`HPM` (the arrival index is the tuple id): with
    ``control_points``, one batch per control point, the policy seeing each batch's observations
    at its end, as the pipeline's per-interval stage runs it.
    """
    arrivals = [Arrival(i, int(t), float(v)) for i, (t, v) in enumerate(zip(ts, values, strict=True))]
    n = len(arrivals)
    op = HPM(query, policy, control="arrival" if control_points is None else "batch")
    cuts = [0, n] if control_points is None else sorted({0, n, *(c for c in control_points if 0 < c <= n)})
    outputs = []
    for lo, hi in pairwise(cuts):
        # arrivals after the last control point: their observations wait for a point that never comes
        last = control_points is not None and hi == n and n not in control_points
        outputs.append(op.feed(arrivals[lo:hi], control=not last))
    if flush:
        outputs.append(op.flush())
    out: dict[str, list[float]] = {key: [] for key in BufferedRun.__dataclass_fields__}
    for o in outputs:
        for e in o.emitted:
            out["window_ids"].append(e.window_id)
            out["values"].append(e.value)
            out["received"].append(e.received)
            out["emitted_at"].append(e.emitted_at)
            out["slack_at_close"].append(e.slack_us)
            out["lag_us"].append(e.lag_us)
            out["lambda_thr"].append(e.lambda_thr)
        for late in o.late:
            out["late_arrival"].append(late.id)
            out["late_window"].append(late.window if late.window is not None else 0)
        for ob in o.observations:
            out["obs_window"].append(ob.window_id)
            out["obs_at"].append(ob.at)
            out["obs_received"].append(ob.received)
            out["obs_late"].append(ob.late)
            out["obs_lambda_thr"].append(ob.lambda_thr)
            out["obs_needed_us"].append(ob.needed_us)
        out["slack"] += o.slack
    return _as_run(out)


def _as_run(out: dict[str, list[float]]) -> BufferedRun:
    floats = {"values", "lambda_thr", "obs_lambda_thr"}
    arrays: dict[str, Any] = {
        key: np.asarray(val, dtype=np.float64 if key in floats else np.int64) for key, val in out.items()
    }
    return BufferedRun(**arrays)
