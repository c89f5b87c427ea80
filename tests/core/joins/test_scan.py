"""QJoin's progress over a batch cut into ranges (core/joins/scan.py) equals it over the whole batch."""

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.joins.scan import (
    KSLACK_LEVEL_KEYS,
    LEVEL_KEYS,
    kslack_fold,
    kslack_progress,
    kslack_summary,
    progress,
    scan_fold,
    scan_summary,
)
from tests.core.joins.strategies import MODELS, make_input


@settings(max_examples=80, deadline=None)
@given(
    st.integers(0, 10_000),
    st.sampled_from(MODELS),
    st.lists(st.integers(1, 59), max_size=5),
    st.sampled_from(
        [
            None,
            {"m_r": 40, "m_s": None, "h_r": None, "h_s": None},
            {"m_r": 90, "m_s": 95, "h_r": 70, "h_s": 80},
        ]
    ),
)
def test_ranges_from_folded_carries_give_the_whole_batchs_progress(seed, model, cuts, start):
    inp = make_input(seed, 60, model)
    d_r = np.where(np.arange(60) < 30, 3, 9).astype(np.int64)
    d_s = np.full(60, 5, dtype=np.int64)
    carry = start or {"m_r": None, "m_s": None, "h_r": None, "h_s": None}
    whole = progress(inp.side, inp.ts, d_r, d_s, carry, 12)
    bounds = sorted({0, 60, *cuts})
    ranges = list(itertools.pairwise(bounds))
    carries = [dict(carry) for _ in ranges]
    for level, keys in enumerate(LEVEL_KEYS):
        for i, (lo, hi) in enumerate(ranges[:-1]):
            part = (inp.side[lo:hi], inp.ts[lo:hi], d_r[lo:hi], d_s[lo:hi])
            after = scan_fold(level, carries[i], scan_summary(level, *part, carries[i], 12))
            carries[i + 1] |= {k: after[k] for k in keys}
    parts = [progress(inp.side[lo:hi], inp.ts[lo:hi], d_r[lo:hi], d_s[lo:hi], carries[i], 12)
             for i, (lo, hi) in enumerate(ranges)]  # fmt: skip
    for key, values in whole.items():
        assert np.concatenate([p[key] for p in parts]).tolist() == values.tolist(), key


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10_000), st.sampled_from(MODELS), st.lists(st.integers(1, 59), max_size=5), st.booleans()
)
def test_kslack_ranges_from_folded_carries_give_the_whole_batchs_frontiers(seed, model, cuts, adaptive):
    inp = make_input(seed, 60, model)
    carry = {"m_r": 30, "m_s": None, "k_r": 4, "k_s": 7, "f_r": 20, "f_s": None}
    whole = kslack_progress(inp.side, inp.ts, carry, adaptive)
    bounds = sorted({0, 60, *cuts})
    ranges = list(itertools.pairwise(bounds))
    carries = [dict(carry) for _ in ranges]
    for level, keys in enumerate(KSLACK_LEVEL_KEYS):
        for i, (lo, hi) in enumerate(ranges[:-1]):
            summary = kslack_summary(level, inp.side[lo:hi], inp.ts[lo:hi], carries[i], adaptive)
            after = kslack_fold(level, carries[i], summary)
            carries[i + 1] |= {k: after[k] for k in keys}
    parts = [
        kslack_progress(inp.side[lo:hi], inp.ts[lo:hi], carries[i], adaptive)
        for i, (lo, hi) in enumerate(ranges)
    ]
    for key, values in whole.items():
        assert np.concatenate([p[key] for p in parts]).tolist() == values.tolist(), key
