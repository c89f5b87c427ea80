import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.joins.feasibility import (
    history_max_retention,
    period_needs,
    period_verdicts,
    requirements,
)
from outoforder.core.joins.metrics import period_of, period_recall
from outoforder.core.joins.qjoin import qjoin_set
from outoforder.core.joins.query import JoinInput, JoinQuery, exact_join

from .strategies import MODELS, make_input

Q = JoinQuery(window_us=20, theta=1.0)


def brute_requirements(inp, truth):
    """Tuple by tuple: the progress when the later tuple arrives, less w, less the earlier's time."""
    out = []
    for a, b in truth.tolist():
        first, last = min(a, b), max(a, b)
        progress = min(max(inp.ts[j] for j in range(last + 1) if inp.side[j] == s) for s in (0, 1))
        out.append(max(progress - Q.window_us - inp.ts[first], 0))
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), model=st.sampled_from(MODELS), q_user=st.sampled_from([0.8, 0.9, 1.0]))
def test_verdicts_hold_their_evidence_and_hindsight_confirms_them(seed, model, q_user):
    inp = make_input(seed, 150, model)
    truth = exact_join(inp, Q)
    if truth.shape[0] == 0:
        return
    req, _ = requirements(inp, Q, truth)
    assert req.tolist() == brute_requirements(inp, truth)
    period = period_of(inp, truth, int(inp.ts.min()), 100)
    needs = period_needs(req, period, q_user)
    d = history_max_retention(len(inp), truth, period, needs)
    later = truth.max(axis=1)
    assert d.tolist() == [  # the most any period needed whose pairs had all arrived before
        max([n for p, n in needs.items() if later[period == p].max() < i], default=0) for i in range(len(inp))
    ]
    for v in period_verdicts(inp, Q, truth, 100, q_user):
        # hindsight's need is the least constant retention meeting the target in that period
        met = {
            p.period: p.met
            for p in period_recall(
                inp, truth, qjoin_set(inp, Q, v.needed_us, v.needed_us, truth).pairs, 100, q_user
            )
        }
        assert met[v.period]
        if v.needed_us > 0:
            less = v.needed_us - 1
            run = qjoin_set(inp, Q, less, less, truth)
            assert not {p.period: p.met for p in period_recall(inp, truth, run.pairs, 100, q_user)}[v.period]
        assert v.seen_before_us == max([n for p, n in needs.items() if p < v.period], default=0)
        if not v.feasible:  # the generous controller missed it, and no period had needed as much
            assert v.history_max_recall < q_user and v.needed_us > v.seen_before_us
            assert "needed a retention" in v.reason()


def test_an_ordered_stream_has_no_infeasible_period():
    rng = np.random.default_rng(1)
    n = 400
    ts = np.sort(rng.integers(0, 2_000, n)).astype(np.int64)
    inp = JoinInput(
        rng.integers(0, 2, n), ts, rng.integers(0, 4, n) * 1.0, np.zeros(n), np.zeros(n, np.int64)
    )
    verdicts = period_verdicts(inp, Q, None, 200, 1.0)
    assert verdicts and all(v.feasible and v.needed_us == 0 for v in verdicts)


def test_a_lateness_never_seen_before_is_infeasible_and_says_why():
    # period 0: pairs on time; period 1: one S tuple held back far longer than anything before
    rows = [(0, t, 0, 0, 0) for t in range(0, 100, 10)] + [(1, t, 0, 0, 0) for t in range(0, 100, 10)]
    rows.sort(key=lambda r: r[1])
    rows += [(0, 120, 0, 0, 0), (0, 400, 0, 0, 0), (1, 400, 0, 0, 0), (1, 125, 0, 0, 0)]
    inp = JoinInput.from_rows(rows)
    verdicts = {v.period: v for v in period_verdicts(inp, Q, None, 100, 0.9)}
    late = verdicts[1]
    assert not late.feasible
    assert late.needed_us == pytest.approx(400 - 20 - 120) and late.seen_before_us < late.needed_us
    assert verdicts[0].feasible


def _search(meets, upper, grid):
    """The smallest grid value in [0, upper] for which a run meets the target (binary search over runs)."""
    lo, hi = 0, upper // grid + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if meets(mid * grid):
            hi = mid
        else:
            lo = mid + 1
    return lo * grid


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    model=st.sampled_from(MODELS),
    q_user=st.sampled_from([0.5, 0.8, 0.95, 1.0]),
    skip=st.integers(0, 2),
    grid=st.sampled_from([1, 7, 25]),
)
def test_the_least_constant_is_what_a_search_over_real_runs_finds(seed, model, q_user, skip, grid):
    from outoforder.core.joins.feasibility import least_constant
    from outoforder.core.joins.kslack import FixedK, kslack_set, slack_requirements
    from outoforder.stages.join.evaluate import on_grid

    inp = make_input(seed, 150, model)
    truth = exact_join(inp, Q)
    span = int(inp.ts.max() - inp.ts.min())
    period = period_of(inp, truth, int(inp.ts.min()), 100)

    def all_met(run):
        return all(p.met for p in period_recall(inp, truth, run.pairs, 100, q_user)[skip:])

    d = on_grid(least_constant(requirements(inp, Q, truth)[0], period, q_user, skip), span, grid)
    assert d == _search(lambda v: all_met(qjoin_set(inp, Q, v, v, truth)), span, grid)
    k = on_grid(least_constant(slack_requirements(inp, truth), period, q_user, skip), span, grid)
    assert k == _search(lambda v: all_met(kslack_set(inp, Q, FixedK(v, v), truth)), span, grid)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), model=st.sampled_from(MODELS), keep=st.floats(0.0, 1.0))
def test_period_recall_counts_each_period_and_refuses_a_pair_that_is_not_true(seed, model, keep):
    inp = make_input(seed, 150, model)
    truth = exact_join(inp, Q)
    rng = np.random.default_rng(seed)
    produced = truth[rng.random(truth.shape[0]) < keep]
    period = period_of(inp, truth, int(inp.ts.min()), 100)
    got = period_recall(inp, truth, produced, 100, 0.9)
    assert [p.period for p in got] == sorted(set(period.tolist()))
    for p in got:
        mine = {tuple(x) for x in truth[period == p.period].tolist()}
        assert p.true_pairs == len(mine)
        assert p.produced_pairs == sum(tuple(x) in mine for x in produced.tolist())
    wrong = np.array([[len(inp) - 1, len(inp) - 1]])
    if not (truth == wrong).all(axis=1).any():
        with pytest.raises(AssertionError, match="not true pairs"):
            period_recall(inp, truth, np.vstack([produced, wrong]), 100, 0.9)
