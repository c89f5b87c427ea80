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

The first three run on the held-out delay families of the benchmarks as well (bimodal, heavy
tails, outages, a skewed sender), not only on exponential delays: the controllers that adapt at
the stream's own cadence must decide the same whatever the batches, on the disorder they are
judged on.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder import HPM, Arrival, FixedSlack, HPMSlack, PDController, TopK
from outoforder.checks import (
    check_bad_snapshot_refused,
    check_batch_invariance,
    check_late_items,
    check_operator,
    check_snapshot_round_trip,
    installed_cases,
    run,
    split,
)
from outoforder.checks.topk import TOPK
from outoforder.checks.windows import WINDOWS


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


HELD_OUT_FAMILIES = ("bimodal", "heavy_tail", "outages", "skew")  # benchmarks/families.py


@functools.cache
def family_stream(family: str, seed: int, nan_share: float = 0.0, n: int = 240) -> tuple[Arrival, ...]:
    """``n`` arrivals of two vehicles' reports under a family's delays, on :func:`stream`'s scale.

    The ``n`` around the latest arrival of ten minutes of reports (an outage's end, a slow mode's
    straggler). Event times are mapped linearly onto 2 s and positions onto 10 m, which keeps the
    arrival order and so the disorder's shape, at the scale of the cases' windows, retentions and
    distances.
    """
    from outoforder.sources.workloads import arrive, fleet

    inp = arrive(fleet(600.0, vehicles=2, seed=seed), family, seed).inp
    lag = np.maximum.accumulate(inp.ts) - inp.ts
    first = int(np.clip(int(np.argmax(lag)) - n // 2, 0, max(len(lag) - n, 0)))
    part = slice(first, first + n)
    ts, side, x, y = inp.ts[part].astype(np.int64), inp.side[part], inp.x[part], inp.y[part]
    scaled = (ts - ts.min()) * 2_000_000 // max(int(np.ptp(ts)), 1)
    rng = np.random.default_rng(seed)
    value = rng.normal(10, 3, len(ts))
    value[rng.random(len(ts)) < nan_share] = np.nan
    return tuple(
        Arrival(i, int(scaled[i]), float(value[i]), int(side[i]), float(x[i]) / 60, float(y[i]) / 60)
        for i in range(len(ts))
    )


# the built-in operators' cases, each beside its operator's declaration (outoforder.checks.*)
CASES = installed_cases()
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


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.batch_invariant], ids=[c.name for c in CASES if c.batch_invariant]
)
@settings(max_examples=8, deadline=None)
@given(
    family=st.sampled_from(HELD_OUT_FAMILIES),
    seed=st.integers(0, 3),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
    at=st.integers(0, 10_000),
)
def test_a_held_out_familys_stream_gives_the_same_output_whatever_the_batches_and_restores(
    case, family, seed, cuts, at
):
    arrivals = family_stream(family, seed, case.nan_share)
    check_batch_invariance(case, arrivals, split(arrivals, cuts))
    check_snapshot_round_trip(case, split(arrivals, cuts), at)
    check_late_items(case, arrivals, split(arrivals, cuts))


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
    for make in (
        lambda: HPM(WINDOWS, HPMSlack(PDController(lambda_thr=0.9, alpha_initial=0.5))),
        lambda: HPM(WINDOWS, FixedSlack(0)),
    ):
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


def test_every_built_in_operator_has_its_cases_beside_its_declaration():
    assert IDS == [
        "qjoin", "kslack-join", "mp-kslack-join",
        "hpm", "hpm-batch-control", "hpm-recent", "hpm-lateness", "kslack-windows", "mp-kslack-windows",
        "aq-kslack-windows",
        "topk-fixed", "topk-sma", "topk-recompute", "topk-adaptive", "topk-lateness",
    ]  # fmt: skip


def test_the_command_checks_the_installed_cases_and_refuses_an_unknown_one(capsys):
    from outoforder.checks.__main__ import main

    assert main(["qjoin", "topk-sma", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "ok     qjoin" in out and "ok     topk-sma" in out and "hpm" not in out
    with pytest.raises(SystemExit) as refused:
        main(["qjoin", "q-join"])
    assert refused.value.code == 2 and "no case q-join" in capsys.readouterr().err
