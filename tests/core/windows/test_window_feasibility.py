"""The windows' record check: each window's need from its members alone, and the records among them."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.feasibility import window_needs, window_verdicts
from outoforder.core.windows.hpm import buffered_reference
from outoforder.core.windows.quality import emission_errors
from outoforder.core.windows.slack import FixedSlack
from outoforder.sources.disorder import inject


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), aggregate=st.sampled_from(["count", "sum", "max"]))
def test_a_windows_need_is_the_least_constant_k_that_keeps_it_within_eps(seed, aggregate):
    rng = np.random.default_rng(seed)
    n = 300
    ts = np.sort(rng.integers(0, 3_000_000, n)).astype(np.int64)
    order = inject(ts, "lognormal:mu=-3,sigma=1.2,late_prob=0.5", seed).order
    ts, values = ts[order], rng.uniform(1, 10, n)
    windows = Windows(500_000, 250_000)
    ids, needs = window_needs(ts, values, windows, aggregate, 0.05)
    query = WindowQuery(windows, aggregate, 0.05, 0.05, coverage_horizon_us=10**12)  # observe every member
    for k in sorted({0, *needs.tolist()})[:6]:
        run = buffered_reference(ts, values, query, FixedSlack(int(k)), flush=True)
        got, err = emission_errors(ts, values, windows, aggregate, run.window_ids, run.values)
        assert got.tolist() == ids.tolist()
        met = err < 0.05
        # a window meets ε under a constant K exactly when K reaches its need
        assert (met[needs <= k]).all()
        assert not met[needs > k].any()
        # the operator's own observation of each window's need is the same figure
        seen = dict(zip(run.obs_window.tolist(), run.obs_needed_us.tolist(), strict=True))
        assert all(seen[w] == need for w, need in zip(ids.tolist(), needs.tolist(), strict=True) if w in seen)


def test_a_window_is_infeasible_only_when_it_needs_more_than_every_window_before_it():
    ids = np.array([3, 4, 5, 6, 7])
    needs = np.array([0, 500, 300, 500, 900])
    got = [(v.window, v.seen_before_us, v.feasible) for v in window_verdicts(ids, needs)]
    assert got == [(3, 0, True), (4, 0, False), (5, 500, True), (6, 500, True), (7, 500, False)]
    last = window_verdicts(ids, needs)[4]
    assert last.reason() == "needed K = 0.0009 s; the most any window before it needed was 0.0005 s"
    assert window_verdicts(ids, needs)[2].reason() == ""
