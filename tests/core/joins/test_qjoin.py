import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.joins.qjoin import QJoinReference, qjoin_set, run_reference
from outoforder.core.joins.query import JoinInput, JoinQuery, exact_join
from tests.core.joins.strategies import MODELS, assert_same_run, make_input

Q = JoinQuery(window_us=10, theta=1.5)


def brute_force_truth(inp, q):
    return sorted(
        (i, j)
        for i in range(len(inp))
        for j in range(len(inp))
        if inp.side[i] == 0 and inp.side[j] == 1 and q.matches(inp.row(i), inp.row(j))
    )


def test_in_order_streams_lose_nothing_with_zero_retention():
    inp = JoinInput.from_rows([(0, 0), (1, 5), (0, 10), (1, 15), (1, 20), (0, 21)])
    run = qjoin_set(inp, Q, 0, 0)
    assert (
        run.pairs.tolist() == exact_join(inp, Q).tolist() == [[0, 1], [2, 1], [2, 3], [2, 4], [5, 3], [5, 4]]
    )


def test_a_tuple_later_than_the_retention_misses_its_partner():
    # s at ts 0 arrives after T reached 30: the r at ts 5 (window 10) was purged (H = 30 - 10 - 5)
    rows = [(0, 5), (0, 30), (1, 30), (1, 0)]
    inp = JoinInput.from_rows(rows)
    assert qjoin_set(inp, Q, 5, 5).pairs.tolist() == [[1, 2]]
    assert qjoin_set(inp, Q, 20, 20).pairs.tolist() == [[0, 3], [1, 2]]


def test_lowering_retention_never_moves_the_horizon_back():
    op = QJoinReference(Q, (100, 100))
    op.process(0, 0, 0, 0, 0)
    op.process(1, 1, 200, 0, 0)
    op.set_retention(0, 0)
    op.process(2, 0, 300, 0, 0)
    h = op.horizon[0]
    op.set_retention(0, 1000)
    op.process(3, 0, 301, 0, 0)
    assert op.horizon[0] == h  # raising d does not bring back what is gone


def test_snapshot_restore_continues_identically():
    inp = make_input(3, 60, MODELS[0], span_us=200)
    a = QJoinReference(Q, (4, 7))
    out_a = [a.process(i, int(inp.side[i]), *inp.row(i)) for i in range(len(inp))]
    b = QJoinReference(Q, (4, 7))
    out_b = [b.process(i, int(inp.side[i]), *inp.row(i)) for i in range(30)]
    c = QJoinReference(Q, (0, 0), state=b.snapshot())
    out_b += [c.process(i, int(inp.side[i]), *inp.row(i)) for i in range(30, len(inp))]
    assert out_a == out_b


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 120),
    model=st.sampled_from(MODELS),
    w=st.integers(0, 30),
    theta=st.sampled_from([0.0, 1.0, 2.5]),
    predicate=st.sampled_from(["distance", "key"]),
)
def test_truth_equals_brute_force(seed, n, model, w, theta, predicate):
    inp = make_input(seed, n, model)
    q = JoinQuery(window_us=w, theta=theta, predicate=predicate)
    assert [tuple(p) for p in exact_join(inp, q, chunk_candidates=7).tolist()] == brute_force_truth(inp, q)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 150),
    model=st.sampled_from(MODELS),
    w=st.integers(0, 25),
    d_r=st.integers(0, 40),
    d_s=st.integers(0, 40),
    changes=st.lists(st.tuples(st.integers(0, 149), st.integers(0, 40), st.integers(0, 40)), max_size=4),
)
def test_set_form_equals_the_tuple_at_a_time_reference(seed, n, model, w, d_r, d_s, changes):
    inp = make_input(seed, n, model)
    q = JoinQuery(window_us=w, theta=1.5)
    ret_r = np.full(n, d_r, dtype=np.int64)
    ret_s = np.full(n, d_s, dtype=np.int64)
    for at, nr, ns in sorted(changes):  # adaptation: retention changes mid-stream
        ret_r[at:] = nr
        ret_s[at:] = ns
    assert_same_run(qjoin_set(inp, q, ret_r, ret_s), run_reference(inp, q, ret_r, ret_s))


@pytest.mark.parametrize("model", MODELS)
def test_enough_retention_gives_full_recall(model):
    inp = make_input(11, 300, model)
    huge = 10**9
    assert qjoin_set(inp, Q, huge, huge).pairs.tolist() == exact_join(inp, Q).tolist()
