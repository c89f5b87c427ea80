"""HPM's batch module: the late-tuple ledger, the Γ rule, and what repairs do to the results.

Every late membership (a tuple arriving after a window it belongs to was emitted) is recorded in
the ledger. HPM's Γ rule (docs/operators.md, HPM): when the event times of the *pending* late tuples span more
than Γ (``max(ts) − min(ts) > Γ``), they form one repair batch; the batch recomputes every window
they belong to exactly, from everything stored so far, and the ledger starts again empty. Batching
trades freshness for fewer reads of the history: one read per batch instead of one per late tuple.

:func:`ledger_batches` applies the rule over a run's ledger in arrival order;
:func:`repair_history` replays stream emissions and repairs together and says, per window, when its
result became exact (equal to the recomputation over the whole input) and how many rows each
repair read against the rows of the windows it rewrote.

>>> import numpy as np
>>> batches = ledger_batches(np.array([3, 5, 9]), np.array([100, 2_000, 7_000]), gamma_us=5_000)
>>> [(b.trigger, b.tuples.tolist()) for b in batches]
[(9, [3, 5, 9])]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from outoforder.core.windows.aggregate import grouped_aggregates
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import BufferedRun, WindowQuery
from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RepairBatch:
    """One repair: it runs after arrival ``trigger`` (``n`` = the final flush) for these late tuples."""

    trigger: int
    tuples: IntArray  # arrival indices of the late tuples, ascending


def gamma_due(pending_ts: IntArray, gamma_us: int) -> bool:
    """The Γ rule: the pending late tuples' event times span more than Γ."""
    return bool(pending_ts.size) and int(pending_ts.max() - pending_ts.min()) > gamma_us


def ledger_batches(
    late_tuples: IntArray, late_ts: IntArray, gamma_us: int, n: int | None = None
) -> list[RepairBatch]:
    """Repair batches formed by the Γ rule over late tuples given in arrival order.

    ``late_tuples`` are arrival indices (each once, ascending) and ``late_ts`` their event times.
    With ``n`` (the input length), what is still pending at the end forms a final batch at ``n``.
    """
    if gamma_us < 0:
        msg = f"Γ must be >= 0 µs, got {gamma_us}"
        raise ConfigError(msg)
    batches: list[RepairBatch] = []
    start = 0
    lo = hi = 0
    for j, t in enumerate(late_ts.tolist()):
        if j == start:
            lo = hi = t
        lo, hi = min(lo, t), max(hi, t)
        if hi - lo > gamma_us:
            batches.append(RepairBatch(int(late_tuples[j]), late_tuples[start : j + 1].copy()))
            start = j + 1
    if n is not None and start < late_tuples.size:
        batches.append(RepairBatch(n, late_tuples[start:].copy()))
    return batches


def window_runs(ids: IntArray, windows: Windows) -> list[tuple[int, int]]:
    """The event-time ranges ``[lo, hi)`` a repair reads: the given windows, overlapping ones merged."""
    out: list[tuple[int, int]] = []
    for wid in np.unique(ids).tolist():
        lo, hi = windows.bounds(wid)
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


@dataclass(frozen=True)
class RepairHistory:
    """What the stream and the repairs did, per window and per repair batch.

    Per window (``window_ids`` ascending): the exact value over the whole input, the value emitted
    by the stream (NaN if never), when it was emitted, when a result was due (the emission, or for
    a window the stream never emitted, the arrival of its first tuple) and when its result became
    exact (arrival index; ``-1`` = never). Per repair batch: rows read and rows in the affected
    windows, windows recomputed and windows whose value changed.
    """

    window_ids: IntArray
    exact: FloatArray
    emitted: FloatArray
    emitted_at: IntArray
    due_at: IntArray
    exact_at: IntArray
    batch_trigger: IntArray
    batch_rows_read: IntArray
    batch_affected_rows: IntArray
    batch_windows: IntArray
    batch_changed: IntArray


def _same(a: FloatArray, b: FloatArray) -> npt.NDArray[np.bool_]:
    return np.isclose(a, b, rtol=1e-9, atol=1e-12) | (np.isnan(a) & np.isnan(b))


def repair_history(
    ts: IntArray, values: FloatArray, query: WindowQuery, run: BufferedRun, batches: list[RepairBatch]
) -> RepairHistory:
    """Replay the stream's emissions and the repairs, in arrival order."""
    w = query.windows
    ts = np.asarray(ts, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    n = ts.size
    idx, wid = w.explode(ts)
    ids, exact = grouped_aggregates(wid, values[idx], query.aggregate)
    pos = np.searchsorted(ids, run.window_ids)
    emitted = np.full(ids.size, np.nan)
    emitted_at = np.full(ids.size, -1, dtype=np.int64)
    emitted[pos] = run.values
    emitted_at[pos] = run.emitted_at
    first_member = np.full(ids.size, n, dtype=np.int64)
    np.minimum.at(first_member, np.searchsorted(ids, wid), idx)
    due_at = np.where(emitted_at >= 0, emitted_at, first_member)
    current = emitted.copy()
    exact_at = np.where(_same(emitted, exact), emitted_at, -1)
    trig, read, affected, n_win, changed = [], [], [], [], []
    late_set = run.late_window
    for b in batches:
        hit = np.isin(run.late_arrival, b.tuples)
        targets = np.unique(late_set[hit])
        upto = min(b.trigger, n - 1)
        seen = idx <= upto
        in_target = seen & np.isin(wid, targets)
        t_ids, t_vals = grouped_aggregates(wid[in_target], values[idx[in_target]], query.aggregate)
        runs = window_runs(targets, w)
        arrived_ts = ts[: upto + 1]
        read.append(int(sum(((arrived_ts >= lo) & (arrived_ts < hi)).sum() for lo, hi in runs)))
        affected.append(int(np.unique(idx[in_target]).size))
        p = np.searchsorted(ids, t_ids)
        diff = ~_same(current[p], t_vals)
        changed.append(int(diff.sum()))
        n_win.append(int(t_ids.size))
        trig.append(b.trigger)
        current[p] = t_vals
        now_exact = _same(t_vals, exact[p])
        exact_at[p] = np.where(now_exact, np.where(exact_at[p] >= 0, exact_at[p], b.trigger), -1)
    # A value emitted exact stays exact unless a repair wrote something else (handled above).
    return RepairHistory(
        window_ids=ids,
        exact=exact,
        emitted=emitted,
        emitted_at=emitted_at,
        due_at=due_at,
        exact_at=exact_at.astype(np.int64),
        batch_trigger=np.asarray(trig, dtype=np.int64),
        batch_rows_read=np.asarray(read, dtype=np.int64),
        batch_affected_rows=np.asarray(affected, dtype=np.int64),
        batch_windows=np.asarray(n_win, dtype=np.int64),
        batch_changed=np.asarray(changed, dtype=np.int64),
    )


def exact_share_over_time(hist: RepairHistory, points: IntArray) -> FloatArray:
    """At each arrival index: the share of windows due by then whose current result is exact.

    A window the stream never emitted counts as wrong until a repair writes it.
    """
    out = []
    for p in np.asarray(points).tolist():
        due = hist.due_at <= p
        ok = due & (hist.exact_at >= 0) & (hist.exact_at <= p)
        out.append(ok.sum() / max(due.sum(), 1))
    return np.asarray(out, dtype=np.float64)
