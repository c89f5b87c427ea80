"""HPM's buffered window operator over one micro-batch, set at a time, in two parallel parts.

The same outputs as :class:`~outoforder.core.windows.hpm.HPM` fed the batch's arrivals (the
policy's K fixed within a batch, observations applied at its end), computed in two steps that
each split across workers (the Spark twin, :mod:`outoforder.spark.windows`, runs them in tasks):

1. **arrivals** (in arrival order, from the carried state: :func:`arrival_state`): each
   arrival's ``t_max``, largest delay ``k``, buffer ``K`` and close frontier before and after it,
   ``C_before`` and ``C``. These are prefix maxima, so a batch split into ranges of arrivals needs
   only a few numbers per range from the ranges before it (:func:`scan_summary`, :func:`scan_fold`).
   From them, per arrival (:func:`arrival_events`): the windows whose end the frontier passes at
   that arrival (``(C_before, C]``: they *close*) and those whose end plus the coverage horizon
   it passes (they are *observed*).
2. **windows** (any grouping of whole windows: :func:`window_step`): a window's members are the
   values it received while open (carried in the state, or of this batch with ``end > C_before``
   at their arrival) and its late memberships; with its close and observe events that gives its
   emission (aggregate, count, K and ``t_max`` at the closing arrival, ``λ_thr``), its late
   memberships for the ledger, its coverage observation with the K it needed, what it needs so
   far while it is still watched, and what it carries to the next batch. Each membership carries
   its lateness bucket (``t_max`` before its arrival minus the window's end, from step 1), so a
   watched window's lateness profile (:mod:`outoforder.core.windows.lateness`) is carried too.

``tests/core/windows/test_batch.py`` holds the two steps, run over batches, to the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import NEG
from outoforder.core.windows.aggregate import grouped_aggregates
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.lateness import Profiles, bucket_of, needed_slacks, profiles
from outoforder.core.windows.quality import lambda_threshold, received_cv
from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Carry = dict[str, Any]  # t_max, k, c: the largest event time and delay, the frontier (None: nothing seen)
# the carry's keys each level of a split scan settles (scan_summary / scan_fold)
LEVEL_KEYS: tuple[tuple[str, ...], ...] = (("t_max", "k"), ("c",))


def _or_neg(x: int | None) -> int:
    return NEG if x is None else int(x)


def _none(x: int) -> int | None:
    return None if x == NEG else int(x)


def slack_of(k: IntArray, rule: str | int | float, given: IntArray | None = None) -> IntArray:
    """K per arrival from the largest delay so far: a fixed K, ``"max-delay"``, α (``round(α·k)``), or given.

    >>> slack_of(np.array([0, 10, 15]), 0.5).tolist()  # round half to even, as Python's round()
    [0, 5, 8]
    """
    if rule == "column":
        if given is None:
            msg = "rule 'column' needs the given K per arrival"
            raise ConfigError(msg)
        return np.asarray(given, dtype=np.int64)
    if rule == "max-delay":
        return k
    if isinstance(rule, float):
        return np.round(rule * k.astype(np.float64)).astype(np.int64)
    return np.full(k.size, int(rule), dtype=np.int64)


def arrival_state(
    ts: IntArray, carry: Carry, rule: str | int | float, given: IntArray | None = None
) -> dict[str, IntArray]:
    """Per arrival (``ts`` in arrival order) from the carried ``t_max``, ``k`` and frontier ``c``."""
    ts = np.asarray(ts, dtype=np.int64)
    t_max = np.maximum.accumulate(np.concatenate([[_or_neg(carry["t_max"])], ts]))
    before, after = t_max[:-1], t_max[1:]
    delay = np.where(before == NEG, 0, np.maximum(before - ts, 0))
    k = np.maximum.accumulate(np.maximum(delay, int(carry["k"]))) if ts.size else delay
    slack = slack_of(k, rule, given)
    c = np.maximum.accumulate(np.concatenate([[_or_neg(carry["c"])], after - slack]))
    return {
        "t_max": after,
        "t_before": before,
        "delay": delay,
        "k": k,
        "slack": slack,
        "c_before": c[:-1],
        "c": c[1:],
    }


def scan_summary(
    level: int, ts: IntArray, carry: Carry, rule: str | int | float, given: IntArray | None
) -> Carry:
    """What a range of arrivals contributes to the carry of ``level`` (0: t_max and k; 1: c)."""
    if level == 0:
        local = arrival_state(ts, {"t_max": None, "k": 0, "c": None}, 0)
        return {"max_ts": int(ts.max()), "min_ts": int(ts.min()), "k": int(local["k"].max())}
    state = arrival_state(ts, carry, rule, given)
    return {"c": int(state["c"].max())}


def scan_fold(level: int, carry: Carry, summary: Carry) -> Carry:
    """The carry after a range of arrivals, from the carry before it and the range's summary."""
    out = dict(carry)
    if level == 0:
        t_max = carry["t_max"]
        k = max(int(carry["k"]), int(summary["k"]))
        if t_max is not None:  # the range's first arrivals were late against the carried t_max
            k = max(k, int(t_max) - int(summary["min_ts"]))
        out["t_max"] = int(summary["max_ts"]) if t_max is None else max(int(t_max), int(summary["max_ts"]))
        out["k"] = k
        return out
    out["c"] = int(summary["c"]) if carry["c"] is None else max(int(carry["c"]), int(summary["c"]))
    return out


def _passed(
    c_before: IntArray, c: IntArray, offset: int, windows: Windows, lo: int, hi: int
) -> tuple[IntArray, IntArray]:
    """(arrival index, window id) for every window whose ``end + offset`` lies in ``(C_before, C]``."""
    size, slide = windows.size_us, windows.slide_us
    top = np.floor_divide(c - offset - size, slide)
    # below: the window after the last one passed before (a frontier passes each window once); no
    # frontier before (the stream's very first arrival): ``lo``. Above: ``hi``.
    bottom = np.where(c_before == NEG, lo, np.floor_divide(c_before - offset - size, slide) + 1)
    top = np.minimum(top, hi)
    counts = np.maximum(top - bottom + 1, 0)
    idx = np.repeat(np.arange(c.size, dtype=np.int64), counts)
    first = np.repeat(bottom, counts)
    offsets = np.arange(idx.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    return idx, first + offsets


@dataclass(frozen=True)
class ArrivalEvents:
    """Step 1's output for a range of arrivals (indices into the range, in arrival order)."""

    state: dict[str, IntArray]
    member: IntArray  # memberships: arrival index ...
    member_wid: IntArray  # ... and window
    late: BoolArray  # the window had closed before the arrival
    close: IntArray  # close events: arrival index ...
    close_wid: IntArray  # ... and the window it closes
    observe: IntArray  # observe events: arrival index ...
    observe_wid: IntArray  # ... and the window whose coverage it observes


def arrival_events(
    ts: IntArray,
    carry: Carry,
    rule: str | int | float,
    windows: Windows,
    horizon_us: int,
    given: IntArray | None = None,
) -> ArrivalEvents:
    """Step 1 for a range of arrivals in arrival order, from the carry before it.

    The frontier passes each window once, so each arrival passes the windows after the last one
    passed before it, up to the last window of the largest event time (no window beyond it holds
    anything); the stream's very first arrival, with no frontier before it, from its own first.
    """
    ts = np.asarray(ts, dtype=np.int64)
    state = arrival_state(ts, carry, rule, given)
    idx, wid = windows.explode(ts)
    c_before = state["c_before"]
    late = (c_before[idx] != NEG) & (windows.end_of(wid) <= c_before[idx])
    lo = int(windows.first_id(ts.min())) if ts.size else 0
    hi = int(windows.last_id(state["t_max"][-1])) if ts.size else -1
    close, close_wid = _passed(c_before, state["c"], 0, windows, lo, hi)
    observe, observe_wid = _passed(c_before, state["c"], horizon_us, windows, lo, hi)
    return ArrivalEvents(state, idx, wid, late, close, close_wid, observe, observe_wid)


@dataclass(frozen=True)
class WindowOutput:
    """Step 2's output for a group of whole windows (arrays; emitted and observed rows by window id)."""

    emitted: dict[
        str, npt.NDArray[Any]
    ]  # wid, value, n_rcv, s1, s2, emitted_at, slack_at_close, lag_us, lambda_thr
    late: dict[str, IntArray]  # seq, ts, wid
    buffer: dict[str, npt.NDArray[Any]]  # wid, seq, ts, v, bucket: received by windows still open
    # wid, n_rcv, n_late, lambda_thr: closed, coverage not yet observed
    watch: dict[str, npt.NDArray[Any]]
    watch_profiles: Profiles  # the watched windows' lateness profiles, row by row
    observed: dict[str, npt.NDArray[Any]]  # wid, obs_at, n_rcv, n_late, lambda_thr, needed_us
    # wid, needed_us: what each window still watched needs so far (the policy's unsettled evidence)
    unsettled: dict[str, IntArray]


def _lookup(keys: IntArray, table_keys: IntArray) -> tuple[BoolArray, IntArray]:
    """For each key: whether it is in the sorted unique ``table_keys``, and where."""
    pos = np.searchsorted(table_keys, keys)
    safe = np.minimum(pos, max(table_keys.size - 1, 0))
    found = (
        (pos < table_keys.size) & (table_keys[safe] == keys) if table_keys.size else np.zeros(keys.size, bool)
    )
    return found, safe


def window_step(
    *,
    aggregate: str,
    eps: float,
    delta: float,
    windows: Windows,
    horizon_us: int,
    # wid, seq, ts, v, late, c_before, bucket (the lateness bucket; batch members; carried: late False)
    members: dict[str, npt.NDArray[Any]],
    watch: dict[str, npt.NDArray[Any]],  # wid, n_rcv, n_late, lambda_thr (carried)
    watch_profiles: Profiles,  # their lateness profiles, row by row
    close: dict[str, IntArray],  # wid, at, slack, t_max (the closing arrival's seq, K and t_max)
    observe: dict[str, IntArray],  # wid, at
    flush: tuple[int, int, int] | None = None,  # (at, K, t_max): close every open window (end of stream)
) -> WindowOutput:
    """Step 2 for whole windows: emissions, late memberships, coverage observations, the state carried on."""
    wid, late = np.asarray(members["wid"], dtype=np.int64), np.asarray(members["late"], dtype=bool)
    received = ~late
    close_wid = np.asarray(close["wid"], dtype=np.int64)
    order = np.argsort(close_wid, kind="stable")
    c_wid = close_wid[order]
    c_at, c_slack, c_tmax = (np.asarray(close[k], dtype=np.int64)[order] for k in ("at", "slack", "t_max"))
    if flush is not None:  # windows with received members and no close event close at the end
        open_wids = np.unique(wid[received])
        extra = open_wids[~_lookup(open_wids, c_wid)[0]]
        c_wid = np.concatenate([c_wid, extra])
        c_at = np.concatenate([c_at, np.full(extra.size, flush[0], dtype=np.int64)])
        c_slack = np.concatenate([c_slack, np.full(extra.size, flush[1], dtype=np.int64)])
        c_tmax = np.concatenate([c_tmax, np.full(extra.size, flush[2], dtype=np.int64)])
        order = np.argsort(c_wid, kind="stable")
        c_wid, c_at, c_slack, c_tmax = c_wid[order], c_at[order], c_slack[order], c_tmax[order]
    closing, _ = _lookup(wid, c_wid)
    emit = received & closing
    v = np.asarray(members["v"], dtype=np.float64)
    ids, value = grouped_aggregates(wid[emit], v[emit], aggregate)
    _, n_rcv = grouped_aggregates(wid[emit], v[emit], "count")
    _, s1 = grouped_aggregates(wid[emit], v[emit], "sum")
    _, s2 = grouped_aggregates(wid[emit], v[emit] * v[emit], "sum")
    _, at_pos = _lookup(ids, c_wid)
    lam = lambda_threshold(aggregate, eps, delta, n_rcv.astype(np.int64), received_cv(n_rcv, s1, s2))
    emitted = {
        "wid": ids,
        "value": value,
        "n_rcv": n_rcv.astype(np.int64),
        "s1": s1,
        "s2": s2,
        "emitted_at": c_at[at_pos],
        "slack_at_close": c_slack[at_pos],
        "lag_us": c_tmax[at_pos] - windows.end_of(ids),
        "lambda_thr": lam,
    }
    keep = received & ~closing
    seq, ts = np.asarray(members["seq"], dtype=np.int64), np.asarray(members["ts"], dtype=np.int64)
    bucket = np.asarray(members["bucket"], dtype=np.int64)
    buffer = {"wid": wid[keep], "seq": seq[keep], "ts": ts[keep], "v": v[keep], "bucket": bucket[keep]}
    late_rows = {"seq": seq[late], "ts": ts[late], "wid": wid[late]}

    # coverage: the carried watch list, the windows emitted now, and late memberships that came
    # while the frontier had not yet passed the window's end + horizon
    c_before = np.asarray(members["c_before"], dtype=np.int64)
    counted = late & (c_before < windows.end_of(wid) + horizon_us)
    late_ids, late_counts = np.unique(wid[counted], return_counts=True)
    w_wid = np.concatenate([np.asarray(watch["wid"], dtype=np.int64), ids])
    w_rcv = np.concatenate([np.asarray(watch["n_rcv"], dtype=np.int64), n_rcv.astype(np.int64)])
    w_late = np.concatenate([np.asarray(watch["n_late"], dtype=np.int64), np.zeros(ids.size, dtype=np.int64)])
    w_lam = np.concatenate([np.asarray(watch["lambda_thr"], dtype=np.float64), lam])
    _, emit_row = _lookup(wid[emit], ids)  # the emitted windows' received lateness
    w_prof = [watch_profiles, profiles(emit_row, bucket[emit], v[emit], ids.size)]
    known, _ = _lookup(late_ids, np.sort(w_wid))
    empty = float(lambda_threshold(aggregate, eps, delta, 0, 0.0)[0])  # nothing received: full coverage
    new = int((~known).sum())
    w_wid = np.concatenate([w_wid, late_ids[~known]])
    w_rcv = np.concatenate([w_rcv, np.zeros(new, dtype=np.int64)])
    w_late = np.concatenate([w_late, np.zeros(new, dtype=np.int64)])
    w_lam = np.concatenate([w_lam, np.full(new, empty)])
    order = np.argsort(w_wid, kind="stable")
    w_wid, w_rcv, w_late, w_lam = w_wid[order], w_rcv[order], w_late[order], w_lam[order]
    w_profiles = Profiles.concat([*w_prof, Profiles.empty(new)]).take(order)
    hit, pos = _lookup(late_ids, w_wid)
    np.add.at(w_late, pos[hit], late_counts[hit])
    _, late_row = _lookup(wid[counted], w_wid)
    w_profiles.add(late_row, bucket[counted], v[counted])
    o_wid = np.asarray(observe["wid"], dtype=np.int64)
    o_at = np.asarray(observe["at"], dtype=np.int64)
    seen, pos = _lookup(o_wid, w_wid)
    gone = np.zeros(w_wid.size, dtype=bool)
    gone[pos[seen]] = True
    observed = {
        "wid": o_wid[seen],
        "obs_at": o_at[seen],
        "n_rcv": w_rcv[pos[seen]],
        "n_late": w_late[pos[seen]],
        "lambda_thr": w_lam[pos[seen]],
        "needed_us": needed_slacks(w_profiles.take(pos[seen]), aggregate, eps, w_lam[pos[seen]]),
    }
    still = ~gone
    return WindowOutput(
        emitted=emitted,
        late=late_rows,
        buffer=buffer,
        watch={
            "wid": w_wid[still],
            "n_rcv": w_rcv[still],
            "n_late": w_late[still],
            "lambda_thr": w_lam[still],
        },
        watch_profiles=w_profiles.take(still),
        unsettled={
            "wid": w_wid[still],
            "needed_us": needed_slacks(w_profiles.take(still), aggregate, eps, w_lam[still]),
        },
        observed=observed,
    )


def foreseen_needs(
    *,
    aggregate: str,
    eps: float,
    delta: float,
    windows: Windows,
    horizon_us: int,
    frontier: int | None,
    ts: IntArray,
    v: FloatArray,
    t_before: IntArray,
    watch: dict[str, npt.NDArray[Any]],  # wid, lambda_thr (carried; sorted by wid)
    watch_profiles: Profiles,
) -> dict[str, IntArray]:
    """What the windows watched at a batch's start need once the batch's memberships into them count.

    A window closed before the batch (its end at or before the carried frontier) stays closed
    whatever K the batch runs with: its memberships from the batch are late under any K, and their
    lateness buckets come from ``t_before``, the largest event time before each arrival, which no
    K changes either. Counted before the batch, they let the lateness controller fix the batch's
    K on what the batch's late arrivals say about the closed windows, not one interval later.
    The frontier is taken as it stands at the start (a window it passes by its end plus the
    horizon during the batch still counts them): a forecast for K only, the batch's own
    observations and unsettled needs (:func:`window_step`) are exact. ``ts``, ``v`` and
    ``t_before`` may be any subset of the batch's arrivals holding those memberships. Returns
    ``wid`` and ``needed_us`` by window id, like :attr:`WindowOutput.unsettled`.
    """
    w_wid = np.asarray(watch["wid"], dtype=np.int64)
    w_lam = np.asarray(watch["lambda_thr"], dtype=np.float64)
    prof = watch_profiles.take(np.arange(watch_profiles.rows))  # a copy: the state is not touched
    if frontier is not None and np.asarray(ts).size:
        idx, wid = windows.explode(np.asarray(ts, dtype=np.int64))
        end = windows.end_of(wid)
        sel = (end <= frontier) & (end + horizon_us > frontier)
        idx, wid, end = idx[sel], wid[sel], end[sel]
        new = np.setdiff1d(np.unique(wid), w_wid)
        empty = float(lambda_threshold(aggregate, eps, delta, 0, 0.0)[0])
        w_wid = np.concatenate([w_wid, new])
        w_lam = np.concatenate([w_lam, np.full(new.size, empty)])
        order = np.argsort(w_wid, kind="stable")
        w_wid, w_lam = w_wid[order], w_lam[order]
        prof = Profiles.concat([prof, Profiles.empty(new.size)]).take(order)
        bucket = bucket_of(np.asarray(t_before, dtype=np.int64)[idx] - end)
        prof.add(np.searchsorted(w_wid, wid), bucket, np.asarray(v, dtype=np.float64)[idx])
    return {"wid": w_wid, "needed_us": needed_slacks(prof, aggregate, eps, w_lam)}
