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

from collections.abc import Mapping, Sequence
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

    def combine(self, other: DisorderStats) -> DisorderStats:
        """The statistics of two disjoint parts of one scope, each measured with the maxima before it.

        >>> a, b = DisorderStats(2, 1, 5, 5, 5, 10, 15), DisorderStats(1, 1, 3, 3, 0, 12, 12)
        >>> a.combine(b).as_report()["mean_delay_late"] * 1e6
        4.0
        """
        if other.t_first_us is None or other.t_last_us is None:
            return self
        if self.t_first_us is None or self.t_last_us is None:
            return other
        first, last = min(self.t_first_us, other.t_first_us), max(self.t_last_us, other.t_last_us)
        return DisorderStats(
            self.rows + other.rows,
            self.late + other.late,
            max(self.max_delay_us, other.max_delay_us),
            self.sum_delay_us + other.sum_delay_us,
            last - first,
            first,
            last,
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


def carried_delays(event_ts: Sequence[int] | IntArray, scope: Scope, before: Mapping[str, int]) -> IntArray:
    """:func:`late_delays` of a stretch of the arrival order that continues an earlier stretch.

    ``before`` maps a scope to the largest event time it had in the earlier stretch (scopes not in
    it start afresh). Cutting an arrival order anywhere and carrying the maxima gives the delays of
    the whole: this is how ranges of arrivals are judged in parallel.

    >>> carried_delays([3, 9, 4], ["a", "a", "b"], {"a": 5}).tolist()
    [2, 0, 0]
    """
    ts = np.asarray(event_ts, dtype=np.int64)
    sc = np.asarray(scope)
    seen = [s for s in np.unique(sc) if str(s) in before] if ts.size else []
    if not seen:
        return late_delays(ts, sc)
    head_ts = np.array([before[str(s)] for s in seen], dtype=np.int64)
    head_scope = np.array(seen, dtype=sc.dtype)
    return late_delays(np.concatenate([head_ts, ts]), np.concatenate([head_scope, sc]))[len(seen) :]


def scope_maxima(event_ts: Sequence[int] | IntArray, scope: Scope) -> dict[str, int]:
    """The largest event time of each scope (keyed by ``str(scope)``).

    >>> scope_maxima([3, 9, 4], ["a", "a", "b"])
    {'a': 9, 'b': 4}
    """
    ts = np.asarray(event_ts, dtype=np.int64)
    if ts.size == 0:
        return {}
    uniq, inv = np.unique(np.asarray(scope), return_inverse=True)
    top = np.full(uniq.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, inv, ts)
    return {str(k): int(v) for k, v in zip(uniq, top, strict=True)}


def stats_by(ts: IntArray, delays: IntArray, keys: Scope) -> dict[str, DisorderStats]:
    """:class:`DisorderStats` of each key from event times and their delays, keyed by ``str(key)``."""
    k = np.asarray(keys)
    out: dict[str, DisorderStats] = {}
    uniq, inv = np.unique(k, return_inverse=True)
    for i, key in enumerate(uniq):
        mask = inv == i
        out[str(key)] = DisorderStats.of(ts[mask], delays[mask])
    return dict(sorted(out.items()))


def disorder_stats(event_ts: Sequence[int] | IntArray, scope: Scope | None = None) -> DisorderStats:
    """Disorder statistics of one stream (``scope`` groups tuples that are judged separately)."""
    ts = np.asarray(event_ts, dtype=np.int64)
    if ts.size == 0:
        return DisorderStats(0, 0, 0, 0, 0, None, None)
    return DisorderStats.of(ts, late_delays(ts, scope))


def disorder_stats_by(event_ts: Sequence[int] | IntArray, keys: Scope) -> dict[str, DisorderStats]:
    """Statistics of each key's own stream (e.g. per sensor, per device), keyed by ``str(key)``."""
    ts = np.asarray(event_ts, dtype=np.int64)
    return stats_by(ts, late_delays(ts, np.asarray(keys)), keys)
