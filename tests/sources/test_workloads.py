"""The stream shapes and delay families the held-out protocol judges the estimators on."""

import numpy as np
import pytest

from outoforder.core.joins.query import exact_join
from outoforder.errors import ConfigError
from outoforder.sources import workloads as W


@pytest.mark.parametrize(
    ("make", "predicate"),
    [
        (lambda: W.fleet(120, vehicles=10, seed=1), "distance"),
        (lambda: W.meters(120, n_meters=50, seed=1), "key"),
        (lambda: W.clicks(120, sessions_per_s=0.5, seed=1), "key"),
    ],
    ids=["fleet", "meters", "clicks"],
)
def test_every_shape_is_seeded_in_event_order_with_both_sides_and_some_pairs(make, predicate):
    a, b = make(), make()
    assert np.array_equal(a.ts, b.ts) and np.array_equal(a.key, b.key) and np.array_equal(a.x, b.x)
    assert (np.diff(a.ts) >= 0).all()
    assert set(a.side.tolist()) == {0, 1}
    assert a.query.predicate == predicate and 0 < a.interval_us < a.period_us
    arr = W.arrive(a, "lognormal", seed=2)
    pairs = exact_join(arr.inp, a.query)
    assert pairs.shape[0] > 0


def test_a_fleet_of_ten_has_a_few_pairs_a_second_and_forty_many_more():
    ten, forty = W.fleet(300, vehicles=10, seed=3), W.fleet(300, vehicles=40, seed=3)
    rate = {}
    for w in (ten, forty):
        pairs = exact_join(W.arrive(w, "lognormal", 1).inp, w.query)
        rate[w.name] = pairs.shape[0] / 300
    assert 0.5 < rate["fleet-10"] < 10 < rate["fleet-40"]


@pytest.mark.parametrize("family", W.FAMILIES)
def test_every_family_delays_without_losing_or_inventing_tuples(family):
    w = W.meters(300, n_meters=40, seed=4)
    arr = W.arrive(w, family, seed=5)
    assert np.array_equal(np.sort(arr.inp.ts), np.sort(w.ts))
    assert (arr.arrival_us[np.argsort(arr.inp.ts, kind="stable")] >= 0).all()
    assert (np.diff(arr.arrival_us) >= 0).all()  # the sequence is in arrival order
    late = arr.arrival_us - arr.inp.ts
    assert (late >= 0).all() and (late > 0).any()
    assert (arr.shifts_us.size > 0) == (family in ("regimes", "outages", "bursts"))


def test_skew_delays_follow_the_sender():
    w = W.fleet(300, vehicles=10, seed=6)
    arr = W.arrive(w, "skew", seed=7)
    o = np.argsort(arr.inp.ts, kind="stable")
    assert (arr.arrival_us >= arr.inp.ts).all() and o.size == w.ts.size


def test_an_unknown_family_is_named_with_the_known_ones():
    with pytest.raises(ConfigError, match="known: bimodal"):
        W.family_model("bimodel")
