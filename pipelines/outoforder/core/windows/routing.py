"""HPM's time-domain split of an arriving tuple into three classes (docs/operators.md, HPM).

With ``t_max`` the largest event time seen, ``K`` the buffer in force and ``|W|`` the window size:

- class 1 (``BUFFER``): ``t_max − K < ts <= t_max`` — its windows are still open: buffer it;
- class 2 (``OPERATOR``): ``t_max − K − |W| <= ts <= t_max − K`` — a window it belongs to is being
  computed: hand it to the operator;
- class 3 (``LATE``): ``ts < t_max − K − |W|`` — every window it belongs to has closed: record it in
  the late-tuple ledger for batch repair.

A tuple ahead of ``t_max`` (the first tuple, or a new maximum) is class 1: ``t_max`` moves to it.

>>> route([100, 95, 60, 10], t_max=100, k_us=10, size_us=50).tolist()
[1, 1, 2, 3]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

BUFFER, OPERATOR, LATE = 1, 2, 3
IntArray = npt.NDArray[np.int64]


def route(ts: IntArray | list[int], t_max: int, k_us: int, size_us: int) -> IntArray:
    """The class of each timestamp given the state (t_max, K) before it arrives."""
    t = np.asarray(ts, dtype=np.int64)
    edge = t_max - k_us
    return np.where(t > edge, BUFFER, np.where(t >= edge - size_us, OPERATOR, LATE)).astype(np.int64)
