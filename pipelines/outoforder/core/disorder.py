"""Disorder statistics of a stream in arrival order: late fraction, mean and max delay.

Definitions: walk the tuples in arrival order within one scope (the whole stream, or one source or
key on its own), keeping the largest event time seen so far in that scope. A tuple whose event time
is below that maximum is *late*, and its *delay* is the maximum minus its event time; any other
tuple is on time (delay 0) and raises the maximum to its own event time. The late fraction is
late tuples / rows; the mean delay is over the late tuples only (``mean_delay_all``: over every
tuple); the maximum delay is over all. These are the operators' definitions (docs/operators.md,
"Time, delay and lateness"), and the figures equal those the data folder's ``disorder_stats.py``
script prints and its READMEs quote.

Everything is vectorised with numpy: one stable sort by scope, a rank transform so that a single
``np.maximum.accumulate`` computes all scopes' running maxima at once.

>>> import numpy as np
>>> s = disorder_stats(np.array([10, 30, 20, 40, 15]))
>>> (s.rows, s.late, s.max_delay_us, s.mean_delay_late_us)
(5, 2, 25, 17.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.time import US_PER_SECOND

IntArray = npt.NDArray[np.int64]
Scope = Sequence[Any] | npt.NDArray[Any]


@dataclass(frozen=True)
class DisorderStats:
    """Disorder of one scope; delays in microseconds, ``span_us`` = max − min event time."""

    rows: int
    late: int
    max_delay_us: int
    sum_delay_us: int
    span_us: int
    t_first_us: int | None
    t_last_us: int | None

    @property
    def late_frac(self) -> float:
        """Fraction of tuples that are late."""
        return self.late / self.rows if self.rows else 0.0

    @property
    def mean_delay_late_us(self) -> float:
        """Mean delay over the late tuples only."""
        return self.sum_delay_us / self.late if self.late else 0.0

    @property
    def mean_delay_all_us(self) -> float:
        """Mean delay over all tuples (on-time tuples count as 0)."""
        return self.sum_delay_us / self.rows if self.rows else 0.0

    @classmethod
    def of(cls, ts: IntArray, delays: IntArray) -> DisorderStats:
        """Statistics from event times and their per-tuple delays (same order, non-empty)."""
        return cls(
            rows=int(ts.size),
            late=int(np.count_nonzero(delays)),
            max_delay_us=int(delays.max()),
            sum_delay_us=int(delays.sum()),
            span_us=int(ts.max() - ts.min()),
            t_first_us=int(ts.min()),
            t_last_us=int(ts.max()),
        )

    def as_report(self) -> dict[str, Any]:
        """Seconds-based figures, with the same keys as ``disorder_stats.py``."""
        return {
            "rows": self.rows,
            "late": self.late,
            "late_frac": round(self.late_frac, 6),
            "max_delay": self.max_delay_us / US_PER_SECOND,
            "mean_delay_late": self.mean_delay_late_us / US_PER_SECOND,
            "mean_delay_all": self.mean_delay_all_us / US_PER_SECOND,
            "span": self.span_us / US_PER_SECOND,
        }

    def to_dict(self) -> dict[str, Any]:
        """Raw fields (for JSON / tables)."""
        return asdict(self)


def late_delays(event_ts: Sequence[int] | IntArray, scope: Scope | None = None) -> IntArray:
    """Per-tuple delay (0 when on time) in arrival order, computed within each scope.

    ``event_ts`` is in arrival order. ``scope`` (same length) groups tuples into independent
    streams; ``None`` means one stream.

    >>> late_delays([5, 3, 9, 4], ["a", "b", "a", "a"]).tolist()
    [0, 0, 0, 5]
    """
    ts = np.asarray(event_ts, dtype=np.int64)
    n = ts.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if scope is None:
        group = np.zeros(n, dtype=np.int64)
    else:
        _, group_inv = np.unique(np.asarray(scope), return_inverse=True)
        group = group_inv.astype(np.int64)
    order = np.argsort(group, kind="stable")  # scopes contiguous, arrival order kept
    g_sorted = group[order]
    ts_sorted = ts[order]
    # Dense ranks of event times (ties share a rank) keep order and fit any int64 offset scheme.
    uniq, rank = np.unique(ts_sorted, return_inverse=True)
    keyed = rank.astype(np.int64) + g_sorted * np.int64(uniq.size)
    running = np.maximum.accumulate(keyed)  # resets at scope starts: offsets grow
    prev = np.empty_like(running)
    prev[0] = -1
    prev[1:] = running[:-1]
    starts = np.ones(n, dtype=bool)
    starts[1:] = g_sorted[1:] != g_sorted[:-1]
    prev[starts] = -1  # nothing seen before in this scope
    late = prev > keyed
    delays_sorted = np.zeros(n, dtype=np.int64)
    prev_rank = prev[late] - g_sorted[late] * np.int64(uniq.size)
    delays_sorted[late] = uniq[prev_rank] - ts_sorted[late]
    delays = np.empty(n, dtype=np.int64)
    delays[order] = delays_sorted
    return delays


def disorder_stats(event_ts: Sequence[int] | IntArray, scope: Scope | None = None) -> DisorderStats:
    """Disorder statistics of one stream (``scope`` groups tuples that are judged separately)."""
    ts = np.asarray(event_ts, dtype=np.int64)
    if ts.size == 0:
        return DisorderStats(0, 0, 0, 0, 0, None, None)
    return DisorderStats.of(ts, late_delays(ts, scope))


def disorder_stats_by(event_ts: Sequence[int] | IntArray, keys: Scope) -> dict[str, DisorderStats]:
    """Statistics of each key's own stream (e.g. per sensor, per device), keyed by ``str(key)``."""
    ts = np.asarray(event_ts, dtype=np.int64)
    k = np.asarray(keys)
    d = late_delays(ts, k)
    out: dict[str, DisorderStats] = {}
    uniq, inv = np.unique(k, return_inverse=True)
    for i, key in enumerate(uniq):
        mask = inv == i
        out[str(key)] = DisorderStats.of(ts[mask], d[mask])
    return dict(sorted(out.items()))
