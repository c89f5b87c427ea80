"""The contract every streaming operator keeps (outoforder.core.protocol), checked over all of them.

The checks ship with the package (:mod:`outoforder.checks`, as River's ``check_estimator``); here
they run over every built-in operator with its own definition of late, on many seeds and batchings
(Hypothesis):

- a snapshot taken mid-stream, passed through JSON and restored into a fresh operator, continues
  exactly as the uninterrupted run;
- any split of the arrivals into batches (down to one tuple) gives the same output (operators
  whose adaptation cadence is per batch say so and are left out of this one);
- no late item disappears: what the operator returns as late equals an independent definition of
  late for that operator (a set form or the paper's rule), and nothing is emitted twice;
- a snapshot that is not one fails with a StateError, never with a half-restored operator.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder import (
    HPM,
    AQSlack,
    Arrival,
    CacheSettings,
    FixedSlack,
    HPMSlack,
    JoinQuery,
    KSlackJoin,
    Late,
    LatenessSettings,
    MaxDelaySlack,
    Output,
    PDController,
    QJoin,
    TopK,
    TopKQuery,
    WindowQuery,
    Windows,
)
from outoforder.checks import (
    Case,
    check_bad_snapshot_refused,
    check_batch_invariance,
    check_late_items,
    check_operator,
    check_snapshot_round_trip,
    run,
    split,
)
from outoforder.core.joins.kslack import FixedK, MaxDelayK, kslack_set
from outoforder.core.joins.qjoin import horizons
from outoforder.core.joins.query import JoinInput
from outoforder.core.topk.naive import RecomputeTopK
from outoforder.core.topk.reference import emission_index
from outoforder.core.topk.sma import SkybandTopK
from outoforder.core.windows.buffered import buffered_set
from outoforder.core.windows.slack import LatenessSlack, RecentHPMSlack

QUERY = JoinQuery(window_us=40_000, theta=4.0)
WINDOWS = WindowQuery(Windows(200_000, 50_000), "sum", coverage_horizon_us=100_000)
TOPK = TopKQuery(Windows(200_000, 50_000), k=3, horizon_us=100_000)


def stream(seed: int, n: int = 240, nan_share: float = 0.0) -> list[Arrival]:
    """Two interleaved streams, disordered: tuple i is delayed (exponentially) with probability 0.5."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 2_000_000, n))
    delay = np.where(rng.random(n) < 0.5, rng.exponential(60_000, n), 0.0)
    order = np.argsort(ts + delay, kind="stable")
    value = rng.normal(10, 3, n)
    value[rng.random(n) < nan_share] = np.nan
    side, x, y = rng.integers(0, 2, n), rng.uniform(0, 10, n), rng.uniform(0, 10, n)
    return [
        Arrival(i, int(ts[j]), float(value[j]), int(side[j]), float(x[j]), float(y[j]))
        for i, j in enumerate(order.tolist())
    ]


def join_input(arrivals: list[Arrival]) -> JoinInput:
    return JoinInput.from_rows([(a.side, a.ts, a.x, a.y, a.key) for a in arrivals])


def qjoin_late(arrivals: list[Arrival], out: Output[object]) -> list[Late]:
    """The paper's rule: an arrival behind its own stream's horizon at its arrival is not kept."""
    inp = join_input(arrivals)
    h = horizons(inp, QUERY, np.full(len(inp), 20_000), np.full(len(inp), 10_000))
    return [Late(a.id, a.ts) for i, a in enumerate(arrivals) if a.ts < h[a.side, i]]


def kslack_late(policy: FixedK | MaxDelayK) -> Callable[[list[Arrival], Output[object]], list[Late]]:
    def late(arrivals: list[Arrival], out: Output[object]) -> list[Late]:
        run = kslack_set(join_input(arrivals), QUERY, policy)
        return [Late(a.id, a.ts) for a, is_late in zip(arrivals, run.late.tolist(), strict=True) if is_late]

    return late


def windows_late(arrivals: list[Arrival], out: Output[object]) -> list[Late]:
    """The set form's late memberships under the K the operator was in force with, per arrival."""
    ts = np.array([a.ts for a in arrivals], dtype=np.int64)
    run = buffered_set(ts, np.array([a.value for a in arrivals]), WINDOWS, np.array(out.slack))  # type: ignore[attr-defined]
    return [
        Late(arrivals[i].id, arrivals[i].ts, w)
        for i, w in zip(run.late_arrival, run.late_window, strict=True)
    ]


def topk_fixed_late(arrivals: list[Arrival], out: Output[object]) -> list[Late]:
    """A fixed cache emits window w when the progress reaches end(w) + K: members arriving then are late."""
    scored = [a for a in arrivals if not math.isnan(a.value)]
    ts = np.array([a.ts for a in scored], dtype=np.int64)
    idx, wid = TOPK.windows.explode(ts)
    due = emission_index(ts, TOPK.windows, wid, 30_000)
    late = (idx >= due) & (due < len(scored))
    return [Late(scored[i].id, scored[i].ts, int(w)) for i, w in zip(idx[late], wid[late], strict=True)]


def topk_consistent_late(arrivals: list[Arrival], out: Output[object]) -> list[Late]:
    """Adaptive cache: a membership is late iff its window was emitted at or before the tuple's arrival."""
    scored = [a for a in arrivals if not math.isnan(a.value)]
    emitted_at = {e.window_id: e.at_index for e in out.emitted}  # type: ignore[attr-defined]
    reported = {(x.id, x.window) for x in out.late}
    expected = []
    for i, a in enumerate(scored):
        for w in TOPK.windows.ids_of(a.ts).tolist():
            if (w in emitted_at and emitted_at[w] <= i) or (a.id, w) in reported:
                expected.append(Late(a.id, a.ts, w))
    assert all(
        w not in emitted_at or emitted_at[w] <= i
        for i, a in enumerate(scored)
        for (j, w) in reported
        if j == a.id
    )
    return expected


def pd(thr: float) -> PDController:
    return PDController(lambda_thr=thr, alpha_initial=0.5)


CASES = [
    Case("qjoin", lambda: QJoin(QUERY, (20_000, 10_000)), qjoin_late),
    Case("kslack-join", lambda: KSlackJoin(QUERY, (30_000, 30_000)), kslack_late(FixedK(30_000, 30_000))),
    Case("mp-kslack-join", lambda: KSlackJoin(QUERY, max_delay=True), kslack_late(MaxDelayK())),
    Case("hpm", lambda: HPM(WINDOWS, HPMSlack(pd(0.9))), windows_late),
    Case(
        "hpm-batch-control",
        lambda: HPM(WINDOWS, HPMSlack(pd(0.9)), "batch"),
        windows_late,
        batch_invariant=False,
    ),
    Case("hpm-recent", lambda: HPM(WINDOWS, RecentHPMSlack(pd(0.9), memory=40)), windows_late),
    Case(
        "hpm-lateness",
        lambda: HPM(WINDOWS, LatenessSlack(windows=20, bound_us=60_000, initial_us=10_000)),
        windows_late,
    ),
    Case("kslack-windows", lambda: HPM(WINDOWS, FixedSlack(40_000)), windows_late),
    Case("mp-kslack-windows", lambda: HPM(WINDOWS, MaxDelaySlack()), windows_late),
    Case("aq-kslack-windows", lambda: HPM(WINDOWS, AQSlack(history=50)), windows_late),
    Case("topk-fixed", lambda: TopK(TOPK, cache=30_000), topk_fixed_late, nan_share=0.05),
    Case("topk-sma", lambda: SkybandTopK(TOPK.windows, TOPK.k, 30_000), topk_fixed_late, nan_share=0.05),
    Case(
        "topk-recompute", lambda: RecomputeTopK(TOPK.windows, TOPK.k, 30_000), topk_fixed_late, nan_share=0.05
    ),
    Case(
        "topk-adaptive",
        lambda: TopK(TOPK, CacheSettings(initial_us=30_000, m=4, n=3, eps_min=0.9, min_step_us=1_000)),
        topk_consistent_late,
        nan_share=0.05,
    ),
    Case(
        "topk-lateness",
        lambda: TopK(TOPK, LatenessSettings(initial_us=30_000, n=3, eps_min=0.9, bound_us=80_000)),
        topk_consistent_late,
        nan_share=0.05,
    ),
]
IDS = [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    cuts=st.lists(st.integers(0, 10_000), max_size=6),
    at=st.integers(0, 10_000),
)
def test_a_snapshot_restored_mid_stream_continues_as_the_uninterrupted_run(case, seed, cuts, at):
    check_snapshot_round_trip(case, split(stream(seed, nan_share=case.nan_share), cuts), at)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.batch_invariant], ids=[c.name for c in CASES if c.batch_invariant]
)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_into_batches_gives_the_same_output(case, seed, cuts):
    arrivals = stream(seed, nan_share=case.nan_share)
    check_batch_invariance(case, arrivals, split(arrivals, cuts))


@pytest.mark.parametrize("case", CASES, ids=IDS)
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), cuts=st.lists(st.integers(0, 10_000), max_size=4))
def test_every_late_item_is_returned_and_nothing_is_emitted_twice(case, seed, cuts):
    arrivals = stream(seed, nan_share=case.nan_share)
    out = check_late_items(case, arrivals, split(arrivals, cuts))
    assert len(out.late) > 0  # the streams are disordered enough that every operator meets late tuples


def test_windows_account_for_every_membership():
    # every (tuple, window) membership is either in an emitted window's count or returned late
    arrivals = stream(5)
    for make in (lambda: HPM(WINDOWS, HPMSlack(pd(0.9))), lambda: HPM(WINDOWS, FixedSlack(0))):
        out = run(make(), [arrivals])
        members = sum(len(WINDOWS.windows.ids_of(a.ts)) for a in arrivals)
        assert sum(e.received for e in out.emitted) + len(out.late) == members


def test_topk_counts_the_arrivals_it_cannot_rank():
    arrivals = stream(9, nan_share=0.1)
    op = TopK(TOPK, cache=30_000)
    run(op, [arrivals])
    assert op.unscored == sum(math.isnan(a.value) for a in arrivals) > 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_snapshot_that_is_not_one_fails_clearly(case):
    check_bad_snapshot_refused(case, stream(1))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_shipped_check_passes_every_operator(case):
    check_operator(case, seeds=range(2))
