"""The sort-based θ-join returns exactly the brute-force pairs and tests few more than it returns."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.theta.plan import Theta, brute_force
from outoforder.core.theta.sortjoin import chain_join, sorted_join, sorted_join_chunks

values = st.one_of(
    st.integers(-20, 20).map(float),  # many duplicates
    st.floats(allow_nan=False),  # every finite double, ±inf, ±0.0, subnormals
    st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 0.1, 0.2, 0.30000000000000004]),
)
predicates = st.one_of(
    st.sampled_from(["<", "<=", ">=", ">", "="]).map(Theta.parse),
    st.one_of(
        st.sampled_from([0.0, 0.1, 1.0, 2.5, 1e-300, 1e308, float("inf")]),
        st.floats(0, 1e6, allow_nan=False),
    ).map(lambda c: Theta("band", c)),
)


def _pairs(m: object) -> list[tuple[int, int]]:
    return sorted(zip(m.r.tolist(), m.s.tolist(), strict=True))  # type: ignore[attr-defined]


@settings(max_examples=400, deadline=None)
@given(
    r=st.lists(values, max_size=40),
    s=st.lists(values, max_size=40),
    theta=predicates,
    chunk=st.sampled_from([None, 1, 3, 50]),
)
def test_equals_brute_force_on_every_double(r, s, theta, chunk):
    ra, sa = np.array(r, dtype=np.float64), np.array(s, dtype=np.float64)
    want = [tuple(p) for p in brute_force(ra, sa, theta).tolist()]
    if chunk is None:
        got = sorted_join(ra, sa, theta)
        tested = got.tested
        pairs = _pairs(got)
    else:
        parts = list(sorted_join_chunks(ra, sa, theta, max_candidates=chunk))
        tested = sum(p.tested for p in parts)
        pairs = sorted(x for p in parts for x in _pairs(p))
        for p in parts:  # pieces are bounded unless one row's run alone exceeds the bound
            assert p.tested <= chunk or len(set(p.r.tolist())) <= 1
    assert pairs == want
    assert len(want) <= tested <= len(r) * len(s)


def test_a_band_join_tests_about_as_many_pairs_as_it_returns():
    rng = np.random.default_rng(3)
    r, s = rng.random(4_000), rng.random(4_000)
    for theta in (Theta("band", 2 / 4_000), Theta("band", 0.01), Theta("<"), Theta("=")):
        got = sorted_join(r, s, theta)
        assert got.r.size == brute_force_count(r, s, theta)
        assert got.tested <= got.r.size + 10  # only rounding candidates beyond the output
    # Zipf-like heavy duplicates: equal values are one run, every pair of them matches
    heavy = np.floor(rng.zipf(1.5, 2_000).clip(max=50)).astype(np.float64)
    got = sorted_join(heavy, heavy, Theta("band", 0.5))
    assert got.tested == got.r.size == brute_force_count(heavy, heavy, Theta("band", 0.5))


def test_an_infinite_value_is_tested_against_nothing_under_a_finite_band():
    r, s = np.array([np.inf, -np.inf, 1.0]), np.array([0.0] * 7 + [np.inf, 1.0])
    got = sorted_join(r, s, Theta("band", 0.0))
    assert list(zip(got.r.tolist(), got.s.tolist(), strict=True)) == [(2, 8)]
    assert got.tested == 1  # the infinities meet no run (Hypothesis found 14 tests for [inf, inf])
    everything = sorted_join(r, s, Theta("band", np.inf))  # an infinite band still searches all of S
    assert everything.r.size == brute_force_count(r, s, Theta("band", np.inf))


def brute_force_count(r: np.ndarray, s: np.ndarray, theta: Theta) -> int:
    s_sorted = np.sort(s)
    total = 0
    for k in range(0, r.size, 2_000):  # blocks of the matrix, to bound memory
        total += int(theta.holds(r[k : k + 2_000, None], s_sorted[None, :]).sum())
    return total


@settings(max_examples=150, deadline=None)
@given(
    inputs=st.lists(st.lists(st.integers(-6, 6).map(float) | st.just(float("nan")), max_size=9), min_size=2,
                    max_size=4),
    ops=st.lists(st.sampled_from(["<", "<=", ">=", ">", "=", "band:0", "band:1.5"]), min_size=3, max_size=3),
)  # fmt: skip
def test_a_chain_equals_the_brute_force_product(inputs, ops):
    values = [np.array(v, dtype=np.float64) for v in inputs]
    thetas = [Theta.parse(op) for op in ops[: len(values) - 1]]
    got = sorted(map(tuple, chain_join(values, thetas).rows.tolist()))
    want = sorted(
        idx
        for idx in itertools.product(*[range(v.size) for v in values])
        if all(
            th.holds(values[k][idx[k] : idx[k] + 1], values[k + 1][idx[k + 1] : idx[k + 1] + 1])[0]
            for k, th in enumerate(thetas)
        )
    )
    assert got == want
