import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.disorder import (
    carried_delays,
    disorder_stats,
    disorder_stats_by,
    late_delays,
    scope_maxima,
    stats_by,
)


def brute_force(ts, scope=None):
    """The definition, literally: per scope, a tuple below the running maximum is late by the gap.

    Any other tuple is on time (delay 0) and becomes the maximum (the accumulator of the data
    folder's ``disorder_stats.py``).
    """
    scope = scope if scope is not None else [0] * len(ts)
    mx, delays = {}, []
    for t, s in zip(ts, scope, strict=True):
        m = mx.get(s)
        if m is not None and t < m:
            delays.append(m - t)
        else:
            mx[s] = t
            delays.append(0)
    return delays


def test_in_order_stream_has_no_late_tuples():
    s = disorder_stats([1, 2, 2, 5])
    assert (s.rows, s.late, s.max_delay_us) == (4, 0, 0)


def test_a_tuple_below_the_running_max_is_late_by_the_gap():
    assert late_delays([10, 30, 20, 40, 15]).tolist() == [0, 0, 10, 0, 25]


def test_equal_timestamps_are_not_late():
    assert late_delays([5, 5, 5]).tolist() == [0, 0, 0]


def test_scopes_are_judged_separately():
    # 3 is late overall (after 5) but on time within scope b
    assert late_delays([5, 3, 9, 4], ["a", "b", "a", "a"]).tolist() == [0, 0, 0, 5]
    assert late_delays([5, 3, 9, 4]).tolist() == [0, 2, 0, 5]


def test_means_and_span():
    s = disorder_stats([10, 30, 20, 40, 15])
    assert s.mean_delay_late_us == 17.5
    assert s.mean_delay_all_us == 7.0
    assert s.span_us == 30
    assert s.late_frac == 0.4


def test_empty_stream():
    assert disorder_stats([]).rows == 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**61), 2**61), st.integers(0, 4)), max_size=200))
def test_matches_the_brute_force_oracle(rows):
    ts = [t for t, _ in rows]
    scope = [s for _, s in rows]
    assert late_delays(ts).tolist() == brute_force(ts)
    assert late_delays(ts, scope).tolist() == brute_force(ts, scope)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.sampled_from("abc")), min_size=1, max_size=100))
def test_per_key_stats_equal_stats_of_each_key_alone(rows):
    ts = np.array([t for t, _ in rows])
    keys = np.array([k for _, k in rows])
    per = disorder_stats_by(ts, keys)
    for k, s in per.items():
        alone = disorder_stats(ts[keys == k])
        assert s == alone


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.sampled_from("abc")), max_size=60),
    st.integers(0, 60),
)
def test_a_stretch_carried_on_from_the_maxima_before_it_has_the_delays_of_the_whole(rows, cut):
    """Cut the arrival order anywhere: the second part, given the first part's maxima, is measured alike."""
    ts = np.array([t for t, _ in rows], dtype=np.int64)
    scope = np.array([s for _, s in rows], dtype=object)
    cut = min(cut, len(rows))
    whole = late_delays(ts, scope)
    tail = carried_delays(ts[cut:], scope[cut:], scope_maxima(ts[:cut], scope[:cut]))
    assert tail.tolist() == whole[cut:].tolist()
    head = stats_by(ts[:cut], whole[:cut], scope[:cut])
    rest = stats_by(ts[cut:], tail, scope[cut:])
    combined = {k: head[k].combine(rest[k]) if k in head and k in rest else head.get(k) or rest[k]
                for k in {*head, *rest}}  # fmt: skip
    assert combined == disorder_stats_by(ts, scope)
