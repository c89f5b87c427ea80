"""The per-window multi-way pre-filter: no joining key is ever dropped; the exact one drops all others."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.core.mcf.windowed import keep_shared


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), max_size=25), min_size=2, max_size=4))
def test_keep_shared_keeps_every_key_all_others_hold_and_semi_nothing_else(lists):
    keys = [np.array(k, dtype=np.int64) for k in lists]
    sets = [set(k) for k in lists]
    for method in ("mcf", "semi"):
        for i, (k, mask) in enumerate(zip(keys, keep_shared(keys, method), strict=True)):
            shared = np.array([all(x in s for j, s in enumerate(sets) if j != i) for x in k], dtype=bool)
            assert not (shared & ~mask).any()  # no false negatives
            if method == "semi":
                assert (mask == shared).all()
