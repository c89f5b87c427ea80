"""Stream progress over an arrival sequence, as prefix maxima (vectorised).

``NEG`` stands for "no progress yet" (minus infinity); it is far enough from the int64 limits that
subtracting a window or a retention cannot overflow.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.query import JoinInput, R, S

IntArray = npt.NDArray[np.int64]
NEG = np.iinfo(np.int64).min // 4


def running_max(a: IntArray) -> IntArray:
    """Prefix maximum."""
    return np.maximum.accumulate(a) if a.size else a


def stream_max(inp: JoinInput, side: int) -> IntArray:
    """M_X(i): the largest event time of stream ``side`` among arrivals ``<= i`` (NEG before any)."""
    return running_max(np.where(inp.side == side, inp.ts, NEG))


def joint_progress(inp: JoinInput) -> IntArray:
    """T(i) = min(M_R(i), M_S(i)): NEG until both streams have delivered a tuple."""
    return np.minimum(stream_max(inp, R), stream_max(inp, S))


def previous(a: IntArray) -> IntArray:
    """a(i - 1), with NEG before the first arrival."""
    out = np.empty_like(a)
    if a.size:
        out[0] = NEG
        out[1:] = a[:-1]
    return out


def first_reaching(level: IntArray, values: IntArray, not_before: IntArray) -> IntArray:
    """For each k: the first index j >= not_before[k] with level[j] >= values[k] (len(level) if none).

    ``level`` must be non-decreasing.
    """
    j = np.searchsorted(level, values, side="left").astype(np.int64)
    return np.maximum(j, not_before)


def first_exceeding(level: IntArray, values: IntArray, not_before: IntArray) -> IntArray:
    """For each k: the first index j >= not_before[k] with level[j] > values[k] (len(level) if none)."""
    j = np.searchsorted(level, values, side="right").astype(np.int64)
    return np.maximum(j, not_before)


def count_alive(n: int, born: IntArray, dies: IntArray) -> IntArray:
    """For each i in 0..n-1: how many items have born <= i < dies (items with dies <= born never count)."""
    live = dies > born
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, born[live], 1)
    np.add.at(delta, np.minimum(dies[live], n), -1)
    return np.cumsum(delta[:n])


__all__ = [
    "NEG",
    "R",
    "S",
    "count_alive",
    "first_exceeding",
    "first_reaching",
    "joint_progress",
    "previous",
    "running_max",
    "stream_max",
]
