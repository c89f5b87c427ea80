"""The lateness controller: what it reads off the stream is the truth, and it follows a delay shift."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.topk.cache import (
    FixedCache,
    LatenessController,
    LatenessSettings,
    accuracy_at,
    needed_cache,
)
from outoforder.core.topk.operator import ContinuousTopK, TopKQuery
from outoforder.core.topk.reference import exact_topk, hit_rate, topk_at_cache
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError

W = Windows(size_us=60, slide_us=20)

streams = st.integers(1, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 400), min_size=n, max_size=n),
        st.lists(st.integers(0, 5).map(float), min_size=n, max_size=n),  # many ties
    )
)


class Recording(FixedCache):
    """A fixed K whose windows are settled, keeping what the operator tells a controller."""

    def __init__(self, cache_us: float) -> None:
        super().__init__(cache_us)
        self.profiles: list[list[float]] = []

    def candidates(self) -> list[float]:
        return [self.cache_us]

    def observe(self, hits: list[float], lateness: list[float]) -> None:
        self.profiles.append(lateness)


@settings(max_examples=200, deadline=None)
@given(data=streams, k=st.integers(1, 5), cache=st.sampled_from([0, 7, 20, 60]))
def test_a_settled_windows_lateness_gives_its_hit_rate_at_every_cache_duration(data, k, cache):
    """The controller's premise: from when the true top-k arrived, the hit rate at any K follows."""
    ts, score = np.array(data[0], dtype=np.int64), np.array(data[1])
    tid = np.arange(ts.size, dtype=np.int64)
    policy = Recording(cache)
    op = ContinuousTopK(TopKQuery(W, k=k, horizon_us=10_000), policy)
    emitted = {}
    for x, s, t in zip(ts.tolist(), score.tolist(), tid.tolist(), strict=True):
        emitted.update({e.window_id: e.tids for e in op.process(x, s, t).emitted})
    # two far sentinels: the first emits every window, the second settles them (horizon passed)
    for x, t in ((1_000_000, ts.size), (2_000_000, ts.size + 1)):
        emitted.update({e.window_id: e.tids for e in op.process(x, -1.0, t).emitted})
    truth = exact_topk(ts, score, tid, W, k)
    assert {s.window_id for s in op.settled} == set(truth)  # every window settled, once
    at = {c: topk_at_cache(ts, score, tid, W, k, c) for c in (0, 7, 20, 60, 1_000)}
    for prof, done in zip(policy.profiles, op.settled, strict=True):
        w = done.window_id
        assert done.hit == accuracy_at([prof], cache) == hit_rate(emitted.get(w, []), truth[w])
        for c, lists in at.items():
            assert accuracy_at([prof], c) == hit_rate(lists[w], truth[w])
        assert accuracy_at([prof], done.exact_us) == 1.0
        assert done.exact_us == 0 or accuracy_at([prof], done.exact_us - 1) < 1.0


@settings(max_examples=200, deadline=None)
@given(
    profiles=st.lists(st.lists(st.integers(-50, 500), max_size=6), max_size=8),
    target=st.sampled_from([0.3, 0.5, 0.9, 0.95, 1.0]),
)
def test_needed_cache_is_the_smallest_duration_reaching_the_target(profiles, target):
    k = needed_cache(profiles, target)
    assert accuracy_at(profiles, k) >= target - 1e-9
    if k > 0:
        assert accuracy_at(profiles, k - 1) < target - 1e-9


def shifted_stream(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """4 s of one tuple per ms: delays of ~2 ms, then ~150 ms in the second second, then ~2 ms."""
    rng = np.random.default_rng(seed)
    ts = np.arange(0, 4_000_000, 1_000, dtype=np.int64)
    burst = (ts >= 1_000_000) & (ts < 2_000_000)
    delay = rng.exponential(np.where(burst, 150_000, 2_000)).astype(np.int64)
    order = np.argsort(ts + delay, kind="stable")
    return ts[order], rng.random(ts.size)[order], np.arange(ts.size, dtype=np.int64)[order]


def test_the_controller_rises_before_the_burst_settles_and_comes_back_down():
    ts, score, tid = shifted_stream(5)
    query = TopKQuery(Windows(50_000, 10_000), k=3, horizon_us=400_000)
    op = ContinuousTopK(query, LatenessController(LatenessSettings(initial_us=5_000, n=10, eps_min=0.9)))
    for x, s, t in zip(ts.tolist(), score.tolist(), tid.tolist(), strict=True):
        op.process(x, s, t)
    trace = [(p, d.k_min_us) for d, (_, p) in zip(op.decisions, op.decided_at, strict=True)]
    # the first burst window ends at 1.05 s and settles 0.4 s after its emission: K is up well before
    first_high = next(p for p, k in trace if k > 50_000)
    assert 1_000_000 < first_high < 1_450_000
    assert max(k for _, k in trace) > 100_000
    # the burst's last windows are emitted about K (~0.45 s) after their end and settle a horizon
    # (0.4 s) later: from then on the calm evidence brings K back down
    calm = [k for p, k in trace if p > 3_300_000]
    assert calm and max(calm) < 20_000


def test_the_bound_caps_k_and_the_decisions_say_what_was_needed():
    ts, score, tid = shifted_stream(6)
    bound = 40_000
    query = TopKQuery(Windows(50_000, 10_000), k=3, horizon_us=400_000)
    ctl = LatenessController(LatenessSettings(initial_us=5_000, n=10, eps_min=0.9, bound_us=bound))
    op = ContinuousTopK(query, ctl)
    for x, s, t in zip(ts.tolist(), score.tolist(), tid.tolist(), strict=True):
        op.process(x, s, t)
    assert max(d.k_min_us for d in op.decisions) == bound
    short = [d for d in op.decisions if d.feasible is False]
    assert short, "the burst needs more than the bound, and the decisions say so"
    assert all(d.needed_us is not None and d.needed_us > bound and d.k_min_us == bound for d in short)
    assert all(d.reachable is not None and d.reachable < 0.9 for d in short if d.move == "hold")
    beyond = [s for s in op.settled if s.exact_us > bound]
    assert beyond and all(s.hit < 1.0 for s in beyond)  # a window needing more than the bound missed


def test_snapshot_and_restore_resume_the_same_decisions():
    ts, score, tid = shifted_stream(7)
    query = TopKQuery(Windows(50_000, 10_000), k=3, horizon_us=200_000)
    s = LatenessSettings(initial_us=5_000, n=10, eps_min=0.9, bound_us=120_000)

    def run(op, idx):
        return [e for i in idx for e in op.process(int(ts[i]), float(score[i]), int(tid[i])).emitted]

    whole = ContinuousTopK(query, LatenessController(s))
    want = run(whole, range(ts.size))
    cut = 1_600
    first = ContinuousTopK(query, LatenessController(s))
    got = run(first, range(cut))
    snap = json.loads(json.dumps({"op": first.snapshot(), "cache": first.cache.snapshot()}))  # type: ignore[attr-defined]
    cache = LatenessController(s)
    cache.restore(snap["cache"])
    second = ContinuousTopK(query, cache)
    second.restore(snap["op"])
    got += run(second, range(cut, ts.size))
    assert got == want
    assert first.decisions + second.decisions == whole.decisions
    assert first.settled + second.settled == whole.settled


@pytest.mark.parametrize(
    "kwargs", [{"n": 0}, {"eps_min": 0.0}, {"eps_min": 1.5}, {"bound_us": -1}, {"headroom": 1.0}]
)
def test_bad_settings_fail_clearly(kwargs):
    with pytest.raises(ConfigError):
        LatenessSettings(**kwargs)


def test_empty_emissions_are_forgotten_once_their_horizon_has_passed():
    # one tuple every 10 windows, always on time: every emission leaves a gap of empty windows
    query = TopKQuery(Windows(10, 10), k=1, horizon_us=50)
    op = ContinuousTopK(query, LatenessController(LatenessSettings(initial_us=0, n=3, eps_min=0.9)))
    for i in range(2_000):
        op.process(i * 100, 1.0, i)
    assert len(op.empty) <= 2  # the gaps within the horizon only, not one per gap of the stream
