"""The contract's cases of the built-in window aggregates: HPM with each slack policy, and the K-slack family.

Each case's rule for late is the set form's (:func:`~outoforder.core.windows.buffered.buffered_set`)
under the K the operator had in force at each arrival (its output's ``slack``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from outoforder.checks import Case
from outoforder.core.control.pd import PDController
from outoforder.core.protocol import Arrival, Late, Output
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import WindowQuery, buffered_set
from outoforder.core.windows.hpm import HPM
from outoforder.core.windows.slack import (
    AQSlack,
    FixedSlack,
    HPMSlack,
    LatenessSlack,
    MaxDelaySlack,
    RecentHPMSlack,
)

WINDOWS = WindowQuery(Windows(200_000, 50_000), "sum", coverage_horizon_us=100_000)


def windows_late(arrivals: list[Arrival], out: Output[Any]) -> list[Late]:
    """The set form's late memberships under the K the operator was in force with, per arrival."""
    ts = np.array([a.ts for a in arrivals], dtype=np.int64)
    run = buffered_set(ts, np.array([a.value for a in arrivals]), WINDOWS, np.array(out.slack))  # type: ignore[attr-defined]
    return [
        Late(arrivals[i].id, arrivals[i].ts, w)
        for i, w in zip(run.late_arrival, run.late_window, strict=True)
    ]


def pd(lambda_thr: float) -> PDController:
    """HPM's controller at the quality threshold ``lambda_thr``."""
    return PDController(lambda_thr=lambda_thr, alpha_initial=0.5)


def lateness() -> LatenessSlack:
    """The stage's default policy: K from what recent windows needed, under a bound."""
    return LatenessSlack(windows=20, bound_us=60_000, initial_us=10_000)


def cases() -> list[Case]:
    """HPM (per arrival and per batch, its recent variant, the lateness policy) and the K-slack family."""
    return [
        Case("hpm", lambda: HPM(WINDOWS, HPMSlack(pd(0.9))), windows_late),
        Case("hpm-batch-control", lambda: HPM(WINDOWS, HPMSlack(pd(0.9)), "batch"), windows_late,
             batch_invariant=False),
        Case("hpm-recent", lambda: HPM(WINDOWS, RecentHPMSlack(pd(0.9), memory=40)), windows_late),
        Case("hpm-lateness", lambda: HPM(WINDOWS, lateness()), windows_late),
        Case("kslack-windows", lambda: HPM(WINDOWS, FixedSlack(40_000)), windows_late),
        Case("mp-kslack-windows", lambda: HPM(WINDOWS, MaxDelaySlack()), windows_late),
        Case("aq-kslack-windows", lambda: HPM(WINDOWS, AQSlack(history=50)), windows_late),
    ]  # fmt: skip
