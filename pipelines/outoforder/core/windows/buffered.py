"""Buffered sliding-window aggregates: HPM's stream module and the K-slack family.

Tuple at a time (the reference) and set at a time (given the buffer schedule), over one stream.

The operator's semantics, tuple at a time, are those of :class:`outoforder.core.windows.hpm.HPM`
(its module docstring lists them step by step); :func:`~outoforder.core.windows.hpm.buffered_reference`
drives it over a whole input, optionally with control points (the policy sees observations only
at those arrivals, the end of each micro-batch: how the pipeline's per-interval stage runs).

Set form (:func:`buffered_set`): given ``K`` per arrival, everything is a prefix maximum and a
search: ``C(i)`` is the running max of ``t_max(i) − K(i)``; window ``w`` closes at the first
``i`` with ``C(i) >= end_w``; member ``j`` is received iff ``j <= close_w``; the coverage is
observed at the first ``i`` with ``C(i) >= end_w + H``, counting late members ``j`` up to it.

>>> from outoforder.core.windows.assign import Windows
>>> from outoforder.core.windows.hpm import buffered_reference
>>> from outoforder.core.windows.slack import FixedSlack
>>> q = WindowQuery(Windows(100, 50), "sum", coverage_horizon_us=100)
>>> run = buffered_reference([10, 60, 160, 30, 400], [1.0, 2.0, 4.0, 8.0, 16.0], q, FixedSlack(20))
>>> run.window_ids.tolist(), run.values.tolist(), run.emitted_at.tolist()
([-1, 0, 1, 2, 3, 7, 8], [1.0, 3.0, 2.0, 4.0, 4.0, 16.0, 16.0], [2, 2, 4, 4, 4, 5, 5])
>>> run.late_arrival.tolist(), run.late_window.tolist()   # the tuple at ts 30 came too late
([3, 3], [-1, 0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import NEG, previous, running_max
from outoforder.core.windows.aggregate import grouped_aggregates, reference_aggregate
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.lateness import bucket_of, needed_slacks, profiles
from outoforder.core.windows.quality import check_target, lambda_threshold, received_cv
from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class WindowQuery:
    """A sliding-window aggregate with its quality target and coverage horizon."""

    windows: Windows
    aggregate: str
    eps: float = 0.05
    delta: float = 0.05
    coverage_horizon_us: int = 1_000_000

    def __post_init__(self) -> None:
        check_target(self.eps, self.delta)
        if self.coverage_horizon_us < 0:
            msg = f"coverage horizon must be >= 0 µs, got {self.coverage_horizon_us}"
            raise ConfigError(msg)
        reference_aggregate([], self.aggregate)  # validates the name


@dataclass(frozen=True)
class BufferedRun:
    """Everything a buffered window operator did over one input.

    Emitted windows are in emission order (window order): ``window_ids``, ``values``,
    ``received`` (n_rcv), ``emitted_at`` (arrival index; ``n`` = flushed at the end),
    ``slack_at_close`` and ``lag_us`` (``t_max − end`` at emission: the logical latency) and
    ``lambda_thr``. Late memberships: ``late_arrival`` (arrival index) with ``late_window``.
    Coverage observations in the order the policy saw them: ``obs_window``, ``obs_at``,
    ``obs_received``, ``obs_late``, ``obs_lambda_thr`` and ``obs_needed_us`` (the smallest
    constant K from which on the window's result would have been within ε:
    :mod:`outoforder.core.windows.lateness`). ``slack`` is K after each arrival.
    """

    window_ids: IntArray
    values: FloatArray
    received: IntArray
    emitted_at: IntArray
    slack_at_close: IntArray
    lag_us: IntArray
    lambda_thr: FloatArray
    late_arrival: IntArray
    late_window: IntArray
    obs_window: IntArray
    obs_at: IntArray
    obs_received: IntArray
    obs_late: IntArray
    obs_lambda_thr: FloatArray
    obs_needed_us: IntArray
    slack: IntArray

    @property
    def obs_coverage(self) -> FloatArray:
        """λ_i of every observed window."""
        total = np.maximum(self.obs_received + self.obs_late, 1)
        return np.asarray(self.obs_received / total, dtype=np.float64)


def threshold(query: WindowQuery, vals: Sequence[float]) -> float:
    """λ_thr of a window that received ``vals``: the coverage its (ε, δ) target needs."""
    v = np.asarray(vals, dtype=np.float64)
    count = np.array([v.size], dtype=np.int64)
    cv = received_cv(count.astype(np.float64), np.array([v.sum()]), np.array([(v * v).sum()]))
    return float(lambda_threshold(query.aggregate, query.eps, query.delta, count, cv)[0])


def arrival_state(ts: IntArray, slack: IntArray) -> tuple[IntArray, IntArray]:
    """(t_max(i), C(i)) after each arrival, given K(i)."""
    t_max = running_max(np.asarray(ts, dtype=np.int64))
    return t_max, running_max(t_max - np.asarray(slack, dtype=np.int64))


def arrival_delays(ts: IntArray) -> IntArray:
    """Each arrival's delay: ``t_max`` before it minus its ts, 0 if on time (or first)."""
    before = previous(running_max(np.asarray(ts, dtype=np.int64)))
    return np.where(before == NEG, 0, np.maximum(before - ts, 0))


def buffered_set(
    ts: Sequence[int] | IntArray,
    values: Sequence[float] | FloatArray,
    query: WindowQuery,
    slack: IntArray,
    flush: bool = True,
) -> BufferedRun:
    """The operator's outputs, set at a time, given the K in force after each arrival.

    Equal to :func:`~outoforder.core.windows.hpm.buffered_reference` run with any policy whose K per
    arrival was ``slack``.
    """
    w = query.windows
    ts_a = np.asarray(ts, dtype=np.int64)
    v_a = np.asarray(values, dtype=np.float64)
    slack = np.asarray(slack, dtype=np.int64)
    n = ts_a.size
    t_max, frontier = arrival_state(ts_a, slack)
    idx, wid = w.explode(ts_a)
    ends = w.end_of(wid)
    close_at = np.searchsorted(frontier, ends, side="left")  # first i with C(i) >= end (n: never)
    received = idx <= close_at
    emitted = received & ((close_at < n) | flush)
    e_wid, e_v = wid[emitted], v_a[idx[emitted]]
    ids, v_out = grouped_aggregates(e_wid, e_v, query.aggregate)
    _, cnt = grouped_aggregates(e_wid, e_v, "count")
    _, v_sum = grouped_aggregates(e_wid, e_v, "sum")
    _, sq = grouped_aggregates(e_wid, e_v * e_v, "sum")
    at = np.searchsorted(frontier, w.end_of(ids), side="left")
    lam = lambda_threshold(
        query.aggregate, query.eps, query.delta, cnt.astype(np.int64), received_cv(cnt, v_sum, sq)
    )
    last_slack = slack[-1] if n else 0
    slack_close = np.where(at < n, slack[np.minimum(at, max(n - 1, 0))] if n else 0, last_slack)
    lag = np.where(
        at < n, t_max[np.minimum(at, max(n - 1, 0))] if n else 0, t_max[-1] if n else 0
    ) - w.end_of(ids)
    late = ~received
    order = np.lexsort((wid[late], idx[late]))
    late_arrival, late_window = idx[late][order], wid[late][order]
    # coverage observations: windows emitted before the end, and windows whose first member came late
    obs_at_m = np.searchsorted(frontier, ends + query.coverage_horizon_us, side="left")
    counted_late = late & (idx <= obs_at_m)
    cand = np.unique(wid[(received & (close_at < n)) | counted_late])
    obs_at = np.searchsorted(frontier, w.end_of(cand) + query.coverage_horizon_us, side="left")
    seen = obs_at < n
    cand, obs_at = cand[seen], obs_at[seen]
    n_rcv = _count_by(cand, wid[received & (close_at < n)])
    n_late = _count_by(cand, wid[counted_late])
    # each counted membership's lateness: t_max before its arrival minus the window's end
    counted = ((received & (close_at < n)) | counted_late) & np.isin(wid, cand)
    before = previous(t_max)[idx[counted]]
    buckets = bucket_of(before - ends[counted])  # NEG (nothing before) is far below any end: bucket 0
    prof = profiles(np.searchsorted(cand, wid[counted]), buckets, v_a[idx[counted]], cand.size)
    lam_of = dict(zip(ids.tolist(), lam.tolist(), strict=True))
    empty = threshold(query, [])
    obs_lam = np.array([lam_of.get(c, empty) for c in cand.tolist()], dtype=np.float64)
    obs_order = np.lexsort((cand, obs_at))
    needed = needed_slacks(prof, query.aggregate, query.eps, obs_lam)
    return BufferedRun(
        window_ids=ids,
        values=v_out,
        received=cnt.astype(np.int64),
        emitted_at=at.astype(np.int64),
        slack_at_close=np.asarray(slack_close, dtype=np.int64),
        lag_us=np.asarray(lag, dtype=np.int64),
        lambda_thr=lam,
        late_arrival=late_arrival,
        late_window=late_window,
        obs_window=cand[obs_order],
        obs_at=obs_at[obs_order].astype(np.int64),
        obs_received=n_rcv[obs_order],
        obs_late=n_late[obs_order],
        obs_lambda_thr=obs_lam[obs_order],
        obs_needed_us=needed[obs_order],
        slack=slack,
    )


def _count_by(keys: IntArray, members: IntArray) -> IntArray:
    """How many entries of ``members`` equal each key (keys sorted, unique)."""
    uniq, counts = np.unique(members, return_counts=True)
    pos = np.searchsorted(uniq, keys)
    hit = (
        (pos < uniq.size) & (uniq[np.minimum(pos, max(uniq.size - 1, 0))] == keys)
        if uniq.size
        else np.zeros(keys.size, dtype=bool)
    )
    out = np.zeros(keys.size, dtype=np.int64)
    out[hit] = counts[pos[hit]]
    return out
