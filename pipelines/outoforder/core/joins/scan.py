"""QJoin's per-arrival progress over a micro-batch, from the carried state, in ranges of arrivals.

For each arrival of a batch (in arrival order), from the state carried into the batch: the stream
maxima ``M_R``, ``M_S``, the joint progress ``T = min(M_R, M_S)`` (NEG until both streams have a
tuple) and the horizons ``H_X`` = the running maximum of ``T - w - d_X`` (``d_X`` the retention in
force at the arrival). All are prefix maxima, so a batch cut into ranges needs, per range, the
carry the ranges before it fold to: level 0 the stream maxima (each range's largest event time per
stream), level 1 the horizons (each range's largest ``T - w - d_X``, given the maxima before it).
The Spark twin (:mod:`outoforder.spark.joins`) runs one range per task.

>>> carry = {"m_r": None, "m_s": None, "h_r": None, "h_s": None}
>>> p = progress(np.array([0, 1, 0]), np.array([10, 12, 15]), np.zeros(3, np.int64), np.zeros(3, np.int64),
...              carry, window_us=2)
>>> p["t"].tolist(), p["h_r"].tolist()  # no progress until both streams have a tuple
([-2305843009213693952, 10, 12], [-2305843009213693952, 8, 10])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import NEG

IntArray = npt.NDArray[np.int64]
Carry = dict[str, Any]  # m_r, m_s, h_r, h_s (None: not seen yet)
LEVEL_KEYS: tuple[tuple[str, ...], ...] = (("m_r", "m_s"), ("h_r", "h_s"))


def _or_neg(x: int | None) -> int:
    return NEG if x is None else int(x)


def progress(
    side: IntArray, ts: IntArray, d_r: IntArray, d_s: IntArray, carry: Carry, window_us: int
) -> dict[str, IntArray]:
    """``m_r``, ``m_s``, ``t``, ``h_r``, ``h_s`` after each arrival (NEG where not defined yet)."""
    side, ts = np.asarray(side, dtype=np.int64), np.asarray(ts, dtype=np.int64)
    out: dict[str, IntArray] = {}
    for name, s in (("m_r", 0), ("m_s", 1)):
        own = np.where(side == s, ts, NEG)
        out[name] = np.maximum.accumulate(np.concatenate([[_or_neg(carry[name])], own]))[1:]
    both = (out["m_r"] != NEG) & (out["m_s"] != NEG)
    t = np.where(both, np.minimum(out["m_r"], out["m_s"]), NEG)
    out["t"] = t
    for name, d in (("h_r", d_r), ("h_s", d_s)):
        raw = np.where(t != NEG, t - window_us - np.asarray(d, dtype=np.int64), NEG)
        out[name] = np.maximum.accumulate(np.concatenate([[_or_neg(carry[name])], raw]))[1:]
    return out


def scan_summary(
    level: int, side: IntArray, ts: IntArray, d_r: IntArray, d_s: IntArray, carry: Carry, window_us: int
) -> Carry:
    """What a range of arrivals contributes to the carry of ``level``, given the lower levels' carry."""
    return _last(progress(side, ts, d_r, d_s, carry, window_us), LEVEL_KEYS[level])


def scan_fold(level: int, carry: Carry, summary: Carry) -> Carry:
    """The carry after a range, from the carry before it and the range's summary (maxima)."""
    return _fold_maxima(carry, summary, LEVEL_KEYS[level])


def _last(p: dict[str, IntArray], keys: tuple[str, ...]) -> Carry:
    """Each key's value after a range's last arrival (None: not defined yet, or no arrival)."""
    return {k: None if p[k].size == 0 or p[k][-1] == NEG else int(p[k][-1]) for k in keys}


def _fold_maxima(carry: Carry, summary: Carry, keys: tuple[str, ...]) -> Carry:
    """``carry`` with each of ``keys`` raised to the summary's value (None: nothing seen)."""
    out = dict(carry)
    for k in keys:
        a, b = carry[k], summary[k]
        out[k] = b if a is None else a if b is None else max(a, b)
    return out


# The K-slack family (fixed K, MP-K-slack's K = the largest delay so far, or a K schedule): per
# side, the stream maximum M, the K in force and the release frontier F = running max of (M - K),
# the frontiers before each arrival, and whether the arrival is late (behind its side's frontier).
KSLACK_LEVEL_KEYS: tuple[tuple[str, ...], ...] = (("m_r", "m_s"), ("k_r", "k_s"), ("f_r", "f_s"))


def kslack_progress(
    side: IntArray,
    ts: IntArray,
    carry: Carry,
    adaptive: bool,
    scheduled: tuple[IntArray, IntArray] | None = None,
) -> dict[str, IntArray]:
    """Per arrival: ``m_r``/``m_s``, ``k_r``/``k_s``, ``f_r``/``f_s`` (NEG: none yet), ``delay``, ``late``.

    ``carry`` holds ``m_*``, ``k_*`` and ``f_*`` before the arrivals; K is the carried one
    (fixed), grows to the largest delay of its side (``adaptive``), or is ``scheduled`` per arrival.
    """
    side, ts = np.asarray(side, dtype=np.int64), np.asarray(ts, dtype=np.int64)
    out: dict[str, IntArray] = {}
    before: dict[str, IntArray] = {}
    for name, s in (("r", 0), ("s", 1)):
        m = np.maximum.accumulate(
            np.concatenate([[_or_neg(carry[f"m_{name}"])], np.where(side == s, ts, NEG)])
        )
        out[f"m_{name}"], before[name] = m[1:], m[:-1]
    mine_before = np.where(side == 0, before["r"], before["s"])
    delay = np.where(mine_before == NEG, 0, np.maximum(mine_before - ts, 0))
    out["delay"] = delay
    frontier_before = np.full(ts.size, NEG, dtype=np.int64)
    for name, s in (("r", 0), ("s", 1)):
        if adaptive:
            own = np.where(side == s, delay, 0)
            k = np.maximum.accumulate(np.maximum(own, int(carry[f"k_{name}"]))) if ts.size else own
        elif scheduled is not None:
            k = np.asarray(scheduled[s], dtype=np.int64)
        else:
            k = np.full(ts.size, int(carry[f"k_{name}"]), dtype=np.int64)
        out[f"k_{name}"] = k
        step = np.where(side == s, out[f"m_{name}"] - k, NEG)
        f = np.maximum.accumulate(np.concatenate([[_or_neg(carry[f"f_{name}"])], step]))
        out[f"f_{name}"] = f[1:]
        frontier_before = np.where(side == s, f[:-1], frontier_before)
    out["late"] = (frontier_before != NEG) & (ts < frontier_before)
    return out


def kslack_summary(
    level: int,
    side: IntArray,
    ts: IntArray,
    carry: Carry,
    adaptive: bool,
    scheduled: tuple[IntArray, IntArray] | None = None,
) -> Carry:
    """What a range of arrivals contributes to the K-slack carry of ``level``."""
    return _last(kslack_progress(side, ts, carry, adaptive, scheduled), KSLACK_LEVEL_KEYS[level])


def kslack_fold(level: int, carry: Carry, summary: Carry) -> Carry:
    """The K-slack carry after a range (every level is a running maximum; K never falls)."""
    return _fold_maxima(carry, summary, KSLACK_LEVEL_KEYS[level])
