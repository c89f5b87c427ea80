"""The contract's cases of the built-in joins (QJoin, K-slack, MP-K-slack), each with its own rule for late.

QJoin's rule is the paper's: an arrival behind its own stream's horizon when it arrives is not
kept. K-slack's is its set form's (:func:`~outoforder.core.joins.kslack.kslack_set`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from outoforder.checks import Case
from outoforder.core.joins.kslack import FixedK, KSlackJoin, MaxDelayK, kslack_set
from outoforder.core.joins.qjoin import QJoin, horizons
from outoforder.core.joins.query import JoinInput, JoinQuery
from outoforder.core.protocol import Arrival, Late, Output

QUERY = JoinQuery(window_us=40_000, theta=4.0)
RETENTION_US = (20_000, 10_000)  # QJoin's d_R, d_S
SLACK_US = (30_000, 30_000)  # K-slack's K_R, K_S


def join_input(arrivals: list[Arrival]) -> JoinInput:
    """The arrivals as a join's input (side, ts, x, y, key), in arrival order."""
    return JoinInput.from_rows([(a.side, a.ts, a.x, a.y, a.key) for a in arrivals])


def qjoin_late(arrivals: list[Arrival], out: Output[Any]) -> list[Late]:
    """The paper's rule: an arrival behind its own stream's horizon at its arrival is not kept."""
    inp = join_input(arrivals)
    n = len(inp)
    h = horizons(inp, QUERY, np.full(n, RETENTION_US[0]), np.full(n, RETENTION_US[1]))
    return [Late(a.id, a.ts) for i, a in enumerate(arrivals) if a.ts < h[a.side, i]]


def kslack_late(policy: FixedK | MaxDelayK) -> Callable[[list[Arrival], Output[Any]], list[Late]]:
    """K-slack's rule under ``policy``: the arrivals its set form finds late."""

    def late(arrivals: list[Arrival], out: Output[Any]) -> list[Late]:
        run = kslack_set(join_input(arrivals), QUERY, policy)
        return [Late(a.id, a.ts) for a, is_late in zip(arrivals, run.late.tolist(), strict=True) if is_late]

    return late


def cases() -> list[Case]:
    """QJoin, K-slack with a fixed K and MP-K-slack, on one query."""
    return [
        Case("qjoin", lambda: QJoin(QUERY, RETENTION_US), qjoin_late),
        Case("kslack-join", lambda: KSlackJoin(QUERY, SLACK_US), kslack_late(FixedK(*SLACK_US))),
        Case("mp-kslack-join", lambda: KSlackJoin(QUERY, max_delay=True), kslack_late(MaxDelayK())),
    ]
