"""The contract's cases of the built-in top-k operators: a fixed cache, its two baselines, the adaptive ones.

With a fixed cache K, window w is emitted when the progress reaches end(w) + K, so a member arriving
then is late (:func:`~outoforder.core.topk.reference.emission_index`); an adaptive cache is held to
consistency: a membership is late exactly when its window was emitted at or before the arrival.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from outoforder.checks import Case, ContractViolation
from outoforder.core.protocol import Arrival, Late, Output
from outoforder.core.topk.cache import CacheSettings, LatenessSettings
from outoforder.core.topk.naive import RecomputeTopK
from outoforder.core.topk.operator import TopK, TopKQuery
from outoforder.core.topk.reference import emission_index
from outoforder.core.topk.sma import SkybandTopK
from outoforder.core.windows.assign import Windows

TOPK = TopKQuery(Windows(200_000, 50_000), k=3, horizon_us=100_000)
CACHE_US = 30_000
UNSCORED = 0.05  # the share of arrivals without a score: a ranking operator must count, not rank, them


def fixed_late(arrivals: list[Arrival], out: Output[Any]) -> list[Late]:
    """A fixed cache emits window w when the progress reaches end(w) + K: members arriving then are late."""
    scored = [a for a in arrivals if not math.isnan(a.value)]
    ts = np.array([a.ts for a in scored], dtype=np.int64)
    idx, wid = TOPK.windows.explode(ts)
    due = emission_index(ts, TOPK.windows, wid, CACHE_US)
    late = (idx >= due) & (due < len(scored))
    return [Late(scored[i].id, scored[i].ts, int(w)) for i, w in zip(idx[late], wid[late], strict=True)]


def consistent_late(arrivals: list[Arrival], out: Output[Any]) -> list[Late]:
    """Adaptive cache: a membership is late iff its window was emitted at or before the tuple's arrival."""
    scored = [a for a in arrivals if not math.isnan(a.value)]
    emitted_at = {e.window_id: e.at_index for e in out.emitted}
    reported = {(x.id, x.window) for x in out.late}
    late_windows: dict[int, list[int | None]] = {}
    for j, w in reported:
        late_windows.setdefault(j, []).append(w)
    for i, a in enumerate(scored):
        early = [w for w in late_windows.get(a.id, []) if w in emitted_at and emitted_at[w] > i]
        if early:
            msg = f"topk: tuple {a.id} reported late for windows {early[:3]} emitted after it arrived"
            raise ContractViolation(msg)
    return [
        Late(a.id, a.ts, w)
        for i, a in enumerate(scored)
        for w in TOPK.windows.ids_of(a.ts).tolist()
        if (w in emitted_at and emitted_at[w] <= i) or (a.id, w) in reported
    ]


def cases() -> list[Case]:
    """Top-k with a fixed cache, its baselines (SMA, recompute), and both adaptive caches."""
    adaptive = CacheSettings(initial_us=CACHE_US, m=4, n=3, eps_min=0.9, min_step_us=1_000)
    lateness = LatenessSettings(initial_us=CACHE_US, n=3, eps_min=0.9, bound_us=80_000)
    return [
        Case("topk-fixed", lambda: TopK(TOPK, cache=CACHE_US), fixed_late, nan_share=UNSCORED),
        Case("topk-sma", lambda: SkybandTopK(TOPK.windows, TOPK.k, CACHE_US), fixed_late, nan_share=UNSCORED),
        Case("topk-recompute", lambda: RecomputeTopK(TOPK.windows, TOPK.k, CACHE_US), fixed_late,
             nan_share=UNSCORED),
        Case("topk-adaptive", lambda: TopK(TOPK, adaptive), consistent_late, nan_share=UNSCORED),
        Case("topk-lateness", lambda: TopK(TOPK, lateness), consistent_late, nan_share=UNSCORED),
    ]  # fmt: skip
