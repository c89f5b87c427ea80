"""AQ-K-slack (Ji et al.), QJoin's adaptive baseline: a slack per stream, adapted every L.

It needs both tuples of a pair on time, so it keeps ``P[D_R <= K_R]·P[D_S <= K_S] >= Q_user`` with
the fewest buffered tuples, from the delays of the last L. Its cadence and target are QJoin's
(:class:`~outoforder.core.joins.adaptation.AdaptationSettings`).
"""

from __future__ import annotations

import numpy as np

from outoforder.core.joins.adaptation import AdaptationSettings, adaptation_points
from outoforder.core.joins.kslack import ScheduledK, arrival_delays, kslack_set
from outoforder.core.joins.progress import joint_progress
from outoforder.core.joins.qjoin import JoinRun
from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, R, S


def aq_kslack_schedule(inp: JoinInput, query: JoinQuery, settings: AdaptationSettings) -> ScheduledK:
    """AQ-K-slack's K per stream and interval.

    The cheapest (K_R, K_S) with P[D_R <= K_R]·P[D_S <= K_S] >= Q_user over the last L's delays.
    """
    n = len(inp)
    t = joint_progress(inp)
    delays = arrival_delays(inp)
    k_r = np.full(n, settings.initial_us, dtype=np.int64)
    k_s = np.full(n, settings.initial_us, dtype=np.int64)
    g = settings.granularity_us
    for at in adaptation_points(t, settings.interval_us):
        now = int(t[at - 1])
        recent = np.arange(at) >= np.searchsorted(t[:at], now - settings.interval_us, side="right")
        per = [np.sort(delays[:at][(inp.side[:at] == s) & recent]) for s in (R, S)]
        if per[0].size == 0 or per[1].size == 0:
            continue
        grid = [np.arange(0, int(p[-1]) + g + 1, g, dtype=np.int64) for p in per]
        cdf = [np.searchsorted(p, gr, side="right") / p.size for p, gr in zip(per, grid, strict=True)]
        rate = [p.size for p in per]
        need = settings.q_user / np.maximum(cdf[0], 1e-12)
        j = np.searchsorted(cdf[1], need - 1e-12, side="left")
        ok = np.flatnonzero(j < grid[1].size)
        if ok.size == 0:
            kr, ks = int(grid[0][-1]), int(grid[1][-1])
        else:
            cost = grid[0][ok] * rate[0] + grid[1][j[ok]] * rate[1]
            best = ok[int(np.argmin(cost))]
            kr, ks = int(grid[0][best]), int(grid[1][j[best]])
        k_r[at:] = kr
        k_s[at:] = ks
    return ScheduledK(k_r, k_s)


def run_aq_kslack(
    inp: JoinInput, query: JoinQuery, settings: AdaptationSettings, truth: PairArray | None = None
) -> tuple[JoinRun, ScheduledK]:
    """AQ-K-slack: the K-slack join under the adapted slack schedule."""
    sched = aq_kslack_schedule(inp, query, settings)
    return kslack_set(inp, query, sched, truth=truth), sched
