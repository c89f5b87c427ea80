"""Cuckoo filter and MCF: no false negatives, FPR within the bound, exact deletes, windows, bytes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.mcf.cuckoo import CuckooFilter, buckets_for
from outoforder.core.mcf.windowed import (
    MultiCuckoo,
    WindowFilter,
    mcf_fpr_bound,
    present_in_range,
    windows_in_range,
)
from outoforder.errors import ConfigError, StateError

keys_st = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=0, max_size=400)


@settings(max_examples=150, deadline=None)
@given(
    keys=keys_st,
    capacity=st.integers(1, 700),  # mostly not powers of two
    b=st.sampled_from([1, 2, 4, 8]),
    f=st.sampled_from([4, 8, 12, 16]),
)
def test_no_false_negatives_at_any_capacity_and_deletes_are_exact(keys, capacity, b, f):
    cf = CuckooFilter(capacity, b, f)
    arr = np.array(keys, dtype=np.int64)
    cf.insert(arr)
    assert cf.contains(arr).all()  # stashed fingerprints are found too
    assert cf.count == arr.size
    # delete one copy of every other key; the rest (and remaining duplicates) stay present
    gone, kept = arr[::2], arr[1::2]
    assert cf.delete(gone).all()
    assert cf.contains(kept).all()
    assert cf.count == kept.size
    assert cf.delete(kept).all()
    assert cf.count == 0 and not cf.table.any() and cf.stash_fp.size == 0


def test_capacity_rounds_up_to_a_power_of_two_so_the_alternate_index_is_an_involution():
    for cap in (1, 3, 100, 1000, 12_345):
        n = buckets_for(cap, 4)
        assert n & (n - 1) == 0 and n * 4 * 0.95 >= cap
    cf = CuckooFilter(12_345, 4, 12)
    fp, i1, i2 = cf._locate(np.arange(10_000))
    assert (cf._alt(i2, fp) == i1).all() and (i2 < cf.buckets).all()


def test_duplicates_need_as_many_deletes_as_inserts():
    cf = CuckooFilter(100, 4, 12)
    cf.insert(np.array([5, 5, 5]))
    assert cf.delete(np.array([5, 5])).tolist() == [True, True]
    assert cf.contains(np.array([5])).all()
    assert cf.delete(np.array([5, 5])).tolist() == [True, False]  # only one copy was left
    assert not cf.contains(np.array([5])).any()


@pytest.mark.parametrize(("b", "f"), [(2, 8), (4, 8), (2, 12), (4, 12), (4, 16)])
def test_false_positive_rate_is_within_the_analytic_bound(b, f):
    rng = np.random.default_rng(11)
    cf = CuckooFilter(50_000, b, f)
    stored = rng.integers(0, 2**62, 50_000)
    cf.insert(stored)
    probe = rng.integers(2**62, 2**63 - 1, 200_000)  # disjoint from the stored keys
    fpr = cf.contains(probe).mean()
    # 2b/2^f is the rate of a full table; 200k probes give a standard error below 10 % of it
    assert fpr <= cf.fpr_bound * 1.1, (fpr, cf.fpr_bound)


def test_a_full_filter_stashes_rather_than_losing_keys_and_serializes():
    cf = CuckooFilter(64, 2, 8)
    keys = np.arange(cf.table.size + 20)
    stashed = cf.insert(keys)
    assert stashed > 0 and cf.full
    assert cf.contains(keys).all()
    back = CuckooFilter.from_bytes(cf.to_bytes())
    assert (back.table == cf.table).all() and back.count == cf.count
    assert (back.contains(np.arange(5_000)) == cf.contains(np.arange(5_000))).all()
    assert back.delete(keys).all() and back.count == 0
    with pytest.raises(StateError):
        CuckooFilter.from_bytes(b"nonsense")
    with pytest.raises(ConfigError):
        CuckooFilter(0)
    with pytest.raises(ConfigError):
        cf.insert(np.array([1.5]))


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 199), st.integers(0, 30)), min_size=1, max_size=200),
    ends=st.lists(st.integers(0, 260), min_size=1, max_size=8),
)
def test_a_window_filter_holds_exactly_the_keys_of_its_window(data, ends):
    ts = np.array([d[0] for d in data], dtype=np.int64)
    ks = np.array([d[1] for d in data], dtype=np.int64)
    wf = WindowFilter(size_us=40, slide_us=10, capacity=256)
    wf.add(ts, ks)
    for end in sorted(ends):
        wf.advance(end)
        end = wf.end_us
        inside = ks[(ts >= -(-(end - 40) // 10) * 10)]
        assert wf.contains(inside).all()  # no false negatives
        assert wf.filter.count == wf.keys_held == inside.size  # deletes were exact


def test_multi_cuckoo_early_stop_and_range_query_against_brute_force():
    rng = np.random.default_rng(3)
    streams = {
        s: (np.sort(rng.integers(0, 10_000, 3_000)), rng.integers(0, 5_000, 3_000)) for s in ("r", "s", "t")
    }
    keys = np.arange(6_000)
    lo, hi = 2_000, 8_000
    got = present_in_range(streams, keys, lo, hi, size_us=1_000, slide_us=500, capacity=2_000)
    truth = np.ones(keys.size, dtype=bool)
    for ts, ks in streams.values():
        truth &= np.isin(keys, ks[(ts >= lo) & (ts < hi)])
    assert not (truth & ~got).any()  # no false negatives
    windows = windows_in_range(hi - lo, 1_000, 500)
    bound = mcf_fpr_bound(2 * 4 / 2**12, 3, windows)
    fp_rate = (got & ~truth).sum() / max((~truth).sum(), 1)
    assert fp_rate <= bound

    m = MultiCuckoo(["r", "s", "t"], size_us=1_000, slide_us=500, capacity=2_000)
    for name, (ts, ks) in streams.items():
        sel = (ts >= 9_000) & (ts < 10_000)
        m.add(name, ts[sel], ks[sel])
    m.advance(10_000)
    q = m.query(keys)
    want = np.ones(keys.size, dtype=bool)
    for ts, ks in streams.values():
        want &= np.isin(keys, ks[(ts >= 9_000) & (ts < 10_000)])
    assert not (want & ~q).any()
    assert m.lookups < 3 * keys.size  # the early stop asked the later streams fewer keys
    with pytest.raises(ConfigError):
        m.add("u", np.array([1]), np.array([1]))
