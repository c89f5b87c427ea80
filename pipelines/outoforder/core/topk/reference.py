"""Top-k per sliding window, exact and as a cache of duration K would emit it (set form, numpy).

The query: for every sliding window (``Windows``, event time) the ``k`` tuples of highest score,
ties broken by the smaller tuple id, so every result is one well-defined list.

A cache of duration ``K`` (Wu & Fang 2021, after the paper's Fig. 2; docs/topk.md) emits window
``w`` once the stream's progress (the largest event time seen so far) reaches ``end(w) + K``: its
result is the top-k of the members that arrived before that moment. A window the stream never
passes is emitted at the end, from everything. ``K = inf`` is the exact answer; ``K = 0`` emits at
the close.

Accuracy of an emitted list against the truth is the hit rate ``|result ∩ truth| / |truth|``
(the seed divides by k; a window with fewer than k tuples has a shorter truth).

>>> import numpy as np
>>> from outoforder.core.windows.assign import Windows
>>> w = Windows(size_us=10, slide_us=10)
>>> ts = np.array([1, 12, 5, 25])        # arrival order: the tuple at ts 5 is late for window 0
>>> score = np.array([1.0, 7.0, 9.0, 3.0])
>>> exact_topk(ts, score, np.arange(4), w, k=1)
{0: [2], 1: [1], 2: [3]}
>>> topk_at_cache(ts, score, np.arange(4), w, k=1, cache_us=0)[0]
[0]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
TopK = dict[int, list[int]]  # window id -> tuple ids, best first


def _ranked(wid: IntArray, score: FloatArray, tid: IntArray, k: int) -> TopK:
    """The first ``k`` of every window, by score descending then id ascending."""
    if k < 1:
        msg = f"k must be >= 1, got {k}"
        raise ConfigError(msg)
    out: TopK = {}
    if wid.size == 0:
        return out
    order = np.lexsort((tid, -score, wid))
    w, t = wid[order], tid[order]
    starts = np.flatnonzero(np.r_[True, w[1:] != w[:-1]])
    ends = np.r_[starts[1:], w.size]
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        out[int(w[a])] = t[a : min(b, a + k)].tolist()
    return out


def exact_topk(ts: IntArray, score: FloatArray, tid: IntArray, windows: Windows, k: int) -> TopK:
    """The true top-k of every window holding at least one tuple."""
    idx, wid = windows.explode(np.asarray(ts, dtype=np.int64))
    return _ranked(wid, np.asarray(score, dtype=np.float64)[idx], np.asarray(tid, dtype=np.int64)[idx], k)


def emission_index(ts: IntArray, windows: Windows, wid: IntArray, cache_us: float) -> IntArray:
    """Per window: the arrival index at which a cache of ``cache_us`` emits it (n = at the end)."""
    progress = np.maximum.accumulate(np.asarray(ts, dtype=np.int64))
    due = windows.end_of(wid) + cache_us
    return np.searchsorted(progress, due, side="left").astype(np.int64)


def topk_at_cache(
    ts: IntArray, score: FloatArray, tid: IntArray, windows: Windows, k: int, cache_us: float
) -> TopK:
    """What a cache of duration ``cache_us`` emits for every window (arrival order = array order).

    Every window with a tuple has an entry; it is empty when the window was emitted before any of
    its tuples arrived.
    """
    if cache_us < 0:
        msg = f"cache duration must be >= 0, got {cache_us}"
        raise ConfigError(msg)
    ts = np.asarray(ts, dtype=np.int64)
    idx, wid = windows.explode(ts)
    seen = idx < emission_index(ts, windows, wid, cache_us)
    out = _ranked(
        wid[seen],
        np.asarray(score, dtype=np.float64)[idx[seen]],
        np.asarray(tid, dtype=np.int64)[idx[seen]],
        k,
    )
    for w in np.unique(wid[~seen]).tolist():  # emitted before any of its tuples arrived: empty
        out.setdefault(int(w), [])
    return out


def hit_rate(result: list[int], truth: list[int]) -> float:
    """``|result ∩ truth| / |truth|`` (1.0 for an empty truth)."""
    return len(set(result) & set(truth)) / len(truth) if truth else 1.0


def mean_accuracy(result: TopK, truth: TopK) -> float:
    """The mean hit rate over the windows of ``truth`` (a window never emitted scores 0)."""
    if not truth:
        return 1.0
    return sum(hit_rate(result.get(w, []), t) for w, t in truth.items()) / len(truth)


def hindsight_cache(
    ts: IntArray, score: FloatArray, tid: IntArray, windows: Windows, k: int, eps_min: float, step_us: int
) -> int:
    """The smallest fixed cache duration (a multiple of ``step_us``) whose mean accuracy is >= ε_min.

    The yardstick of the adaptive duration. A window's hit rate never falls as K grows (a longer
    cache sees a superset of the tuples, and a true top-k tuple seen stays in the seen top-k), so
    the mean is monotone and a binary search over the multiples finds it.
    """
    truth = exact_topk(ts, score, tid, windows, k)
    ts = np.asarray(ts, dtype=np.int64)
    delays = np.maximum.accumulate(ts) - ts
    hi = -(-int(delays.max(initial=0)) // step_us)  # K >= the largest lateness: exact

    def ok(steps: int) -> bool:
        return mean_accuracy(topk_at_cache(ts, score, tid, windows, k, steps * step_us), truth) >= eps_min

    lo = 0
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo * step_us
