"""Exact aggregates per sliding window: the ground truth every stream result is judged against.

Aggregates: ``sum``, ``count``, ``avg``, ``min``, ``max``, ``median`` and ``quantile:q`` (the
inverted-CDF quantile: the smallest value with at least a share q of the window at or below it,
so the result is always a value of the window). :func:`window_aggregates` computes them for all
windows at once (sort by window, reduce segments); :func:`reference_aggregate` is the literal
one-window definition the tests compare it with.

>>> import numpy as np
>>> from outoforder.core.windows.assign import Windows
>>> ts, v = np.array([0, 150, 260]), np.array([1.0, 2.0, 4.0])
>>> ids, vals = window_aggregates(ts, v, Windows(300, 100), "sum")
>>> dict(zip(ids.tolist(), vals.tolist()))
{-2: 1.0, -1: 3.0, 0: 7.0, 1: 6.0, 2: 4.0}
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
SIMPLE = ("sum", "count", "avg", "min", "max", "median")


def parse_aggregate(name: str) -> tuple[str, float]:
    """``("quantile", q)`` for ``quantile:q``, ``("median", 0.5)``, else ``(name, nan)``.

    >>> parse_aggregate("quantile:0.9")
    ('quantile', 0.9)
    """
    if name == "median":
        return "quantile", 0.5
    if name.startswith("quantile:"):
        try:
            q = float(name.split(":", 1)[1])
        except ValueError as e:
            msg = f"bad quantile {name!r}: expected quantile:q with 0 < q <= 1"
            raise ConfigError(msg) from e
        if not 0.0 < q <= 1.0:
            msg = f"quantile q must be in (0, 1], got {q}"
            raise ConfigError(msg)
        return "quantile", q
    if name not in SIMPLE:
        msg = f"unknown aggregate {name!r}; known: {', '.join(SIMPLE)}, quantile:q"
        raise ConfigError(msg)
    return name, math.nan


def reference_aggregate(values: Sequence[float], name: str) -> float:
    """One window's aggregate, literally (NaN for an empty window, except count = 0)."""
    kind, q = parse_aggregate(name)
    vals = sorted(float(v) for v in values)
    if kind == "count":
        return float(len(vals))
    if not vals:
        return math.nan
    if kind == "sum":
        return math.fsum(vals)
    if kind == "avg":
        return math.fsum(vals) / len(vals)
    if kind == "min":
        return vals[0]
    if kind == "max":
        return vals[-1]
    return vals[max(math.ceil(q * len(vals)) - 1, 0)]  # inverted CDF


def window_aggregates(
    ts: IntArray, values: FloatArray, windows: Windows, name: str
) -> tuple[IntArray, FloatArray]:
    """(window ids, aggregate) for every window holding at least one tuple, ids ascending."""
    idx, wid = windows.explode(np.asarray(ts, dtype=np.int64))
    return grouped_aggregates(wid, np.asarray(values, dtype=np.float64)[idx], name)


def grouped_aggregates(wid: IntArray, v: FloatArray, name: str) -> tuple[IntArray, FloatArray]:
    """(window ids, aggregate) from memberships already assigned: value ``v[j]`` is in window ``wid[j]``."""
    kind, q = parse_aggregate(name)
    wid = np.asarray(wid, dtype=np.int64)
    v = np.asarray(v, dtype=np.float64)
    order = np.lexsort((v, wid))  # by window, values ascending inside (quantiles, stable sums)
    wid, v = wid[order], v[order]
    ids, start, counts = np.unique(wid, return_index=True, return_counts=True)
    if kind == "count":
        return ids, counts.astype(np.float64)
    if kind in ("sum", "avg"):
        sums = np.add.reduceat(v, start) if v.size else np.zeros(0)
        return ids, sums if kind == "sum" else sums / counts
    if kind == "min":
        return ids, v[start] if v.size else np.zeros(0)
    if kind == "max":
        return ids, v[start + counts - 1] if v.size else np.zeros(0)
    rank = np.maximum(np.ceil(q * counts).astype(np.int64) - 1, 0)
    return ids, v[start + rank] if v.size else np.zeros(0)
