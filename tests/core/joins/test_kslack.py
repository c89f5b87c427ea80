import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.joins.kslack import (
    FixedK,
    KSlackJoinReference,
    MaxDelayK,
    ScheduledK,
    arrival_delays,
    kslack_set,
    run_kslack_reference,
)
from outoforder.core.joins.query import JoinInput, JoinQuery, exact_join
from tests.core.joins.strategies import MODELS, assert_same_run, make_input

Q = JoinQuery(window_us=10, theta=1.5)


def test_a_tuple_delayed_more_than_k_is_dropped_as_late():
    inp = JoinInput.from_rows([(0, 0), (0, 50), (0, 20), (1, 20)])
    run = kslack_set(inp, Q, FixedK(10, 10))
    assert run.late.tolist() == [False, False, True, False]
    assert run.pairs.tolist() == []  # its partner (s at 20) had nobody left
    assert kslack_set(inp, Q, FixedK(40, 40)).pairs.tolist() == [[2, 3]]


def test_mp_kslack_grows_k_to_the_largest_delay_and_keeps_it():
    inp = JoinInput.from_rows([(0, 100), (0, 60), (0, 200), (0, 170), (1, 500)])
    assert arrival_delays(inp).tolist() == [0, 40, 0, 30, 0]
    k_r, _ = MaxDelayK().slack(inp, arrival_delays(inp))
    assert k_r.tolist() == [0, 40, 40, 40, 40]
    run = kslack_set(inp, Q, MaxDelayK())
    assert run.late.tolist() == [False, True, False, False, False]  # first outlier is lost


def test_released_tuples_wait_k_in_progress_units():
    inp = JoinInput.from_rows([(0, 0), (0, 5), (0, 10), (0, 15), (0, 20)])
    run = kslack_set(inp, Q, FixedK(10, 10))
    assert run.latency.tolist() == [10, 10, 10, 5, 0]  # the last two are flushed at the end


def test_with_no_disorder_and_k_zero_everything_joins():
    rows = [(i % 2, i) for i in range(40)]
    inp = JoinInput.from_rows(rows)
    assert kslack_set(inp, Q, FixedK(0, 0)).pairs.tolist() == exact_join(inp, Q).tolist()


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 150),
    model=st.sampled_from(MODELS),
    w=st.integers(0, 25),
    policy=st.sampled_from(["fixed", "mp", "scheduled"]),
    k_r=st.integers(0, 40),
    k_s=st.integers(0, 40),
)
def test_set_form_equals_the_tuple_at_a_time_reference(seed, n, model, w, policy, k_r, k_s):
    inp = make_input(seed, n, model)
    q = JoinQuery(window_us=w, theta=1.5)
    if policy == "fixed":
        p = FixedK(k_r, k_s)
    elif policy == "mp":
        p = MaxDelayK()
    else:
        rng = np.random.default_rng(seed)
        p = ScheduledK(rng.integers(0, 40, n).astype(np.int64), rng.integers(0, 40, n).astype(np.int64))
    assert_same_run(kslack_set(inp, q, p), run_kslack_reference(inp, q, p))


@pytest.mark.parametrize("model", MODELS)
def test_results_are_exactly_the_true_pairs_of_non_late_tuples(model):
    inp = make_input(7, 300, model)
    run = kslack_set(inp, Q, MaxDelayK())
    truth = exact_join(inp, Q)
    expected = truth[~run.late[truth[:, 0]] & ~run.late[truth[:, 1]]]
    assert run.pairs.tolist() == expected.tolist()


def test_reference_releases_in_timestamp_order():
    op = KSlackJoinReference(Q, (5, 5))
    for i, ts in enumerate([10, 8, 7, 30]):
        op.process(i, i, 0, ts, 0.0, 0.0)
    assert list(op.released_at) == [2, 1, 0]  # insertion order = release order
