"""MCF: one cuckoo filter per stream over its current sliding window (Hu 2020; docs/mcf.md).

A :class:`WindowFilter` holds the keys of one stream's current window: tuples are inserted by
*pane* (one slide of event time), and when the window moves past a pane its keys are deleted
again (one copy each, so a key seen in two panes stays until both have left). The window is
``[end − size, end)``; ``size`` must be a multiple of ``slide``.

:class:`MultiCuckoo` keeps one such filter per stream and answers "is x in every stream's
current window?" with an early stop: the keys still in question after stream 1 are the only
ones asked of stream 2, and so on.

:func:`present_in_range` is the seed's range query: is x present in every stream somewhere within
``[lo, hi)``? Each stream's window slides through the range by ``slide``, and a key leaves the
search as soon as one window of that stream may hold it; a key no window of some stream holds is
absent. It checks ``⌊(m − w) / k⌋ + 1`` windows per stream (range m, window w, slide k), so the
chance that an absent key passes is at most ``1 − (1 − ε)^(s · windows)`` for s streams and
per-filter rate ε = 2b / 2^f (:func:`mcf_fpr_bound`).

>>> m = MultiCuckoo(["a", "b"], size_us=10, slide_us=5, capacity=100)
>>> m.add("a", ts=np.array([1, 6]), keys=np.array([7, 8]))
2
>>> m.add("b", ts=np.array([2, 8]), keys=np.array([8, 9]))
2
>>> m.query(np.array([7, 8, 9])).tolist()
[False, True, False]
>>> m.advance(15)  # window [5, 15): the keys of pane [0, 5) are gone
>>> m.filters["a"].contains(np.array([7, 8])).tolist()
[False, True]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from outoforder.core.mcf.cuckoo import CuckooFilter
from outoforder.errors import ConfigError, StateError

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def mcf_fpr_bound(fpr: float, streams: int, windows: int) -> float:
    """``1 − (1 − ε)^(s · windows)``, the seed's ε_MCF.

    A bound on the chance that an absent key passes: the union over every window checked.
    """
    return 1.0 - (1.0 - fpr) ** (streams * windows)


def windows_in_range(range_us: int, size_us: int, slide_us: int) -> int:
    """Windows a search over ``range_us`` checks: ``⌊(m − w) / k⌋ + 1`` (at least 1)."""
    return max(0, (range_us - size_us) // slide_us) + 1


@dataclass
class WindowFilter:
    """One stream's keys over its current window, pane by pane."""

    size_us: int
    slide_us: int
    capacity: int
    bucket_size: int = 4
    fingerprint_bits: int = 12
    end_us: int | None = None  # the window is [end − size, end); None before the first tuple
    panes: dict[int, IntArray] = field(default_factory=dict)  # pane id -> keys inserted
    filter: CuckooFilter = field(init=False)

    def __post_init__(self) -> None:
        if self.slide_us <= 0 or self.size_us <= 0 or self.size_us % self.slide_us:
            msg = (
                f"the window size ({self.size_us}) must be a positive multiple of the slide ({self.slide_us})"
            )
            raise ConfigError(msg)
        self.filter = CuckooFilter(self.capacity, self.bucket_size, self.fingerprint_bits)

    def add(self, ts: IntArray, keys: IntArray) -> int:
        """Insert tuples; those already expired are ignored. Returns how many were inserted."""
        ts, keys = np.asarray(ts, dtype=np.int64), np.asarray(keys, dtype=np.int64)
        if ts.shape != keys.shape:
            msg = f"ts and keys differ in shape: {ts.shape} vs {keys.shape}"
            raise ConfigError(msg)
        if self.end_us is not None:
            keep = ts >= self.end_us - self.size_us
            ts, keys = ts[keep], keys[keep]
        if ts.size == 0:
            return 0
        pane = ts // self.slide_us
        order = np.argsort(pane, kind="stable")
        pane, keys = pane[order], keys[order]
        cuts = np.flatnonzero(np.r_[True, pane[1:] != pane[:-1]])
        for a, b in zip(cuts.tolist(), [*cuts[1:].tolist(), pane.size], strict=True):
            p = int(pane[a])
            self.panes[p] = np.concatenate([self.panes.get(p, np.zeros(0, np.int64)), keys[a:b]])
        self.filter.insert(keys)
        if self.filter.full:
            msg = (
                f"the cuckoo filter of capacity {self.capacity} is full ({self.filter.count} keys in the "
                "window): size it for the window's largest key count"
            )
            raise StateError(msg)
        return int(keys.size)

    def advance(self, end_us: int) -> int:
        """Move the window's end to ``end_us`` (never back); delete expired panes. Returns keys deleted."""
        if self.end_us is not None and end_us < self.end_us:
            return 0
        self.end_us = end_us
        first = -(-(end_us - self.size_us) // self.slide_us)  # the oldest pane still inside
        gone = [p for p in self.panes if p < first]
        deleted = 0
        for p in gone:
            deleted += int(self.filter.delete(self.panes.pop(p)).sum())
        return deleted

    def contains(self, keys: IntArray) -> BoolArray:
        """True where a key may be in the window."""
        return self.filter.contains(np.asarray(keys, dtype=np.int64))

    @property
    def keys_held(self) -> int:
        """Keys in the window (with repeats)."""
        return sum(int(v.size) for v in self.panes.values())


@dataclass
class MultiCuckoo:
    """One :class:`WindowFilter` per stream; :meth:`query` asks them in order, stopping early."""

    streams: Sequence[str]
    size_us: int
    slide_us: int
    capacity: int
    bucket_size: int = 4
    fingerprint_bits: int = 12
    filters: dict[str, WindowFilter] = field(init=False)
    lookups: int = field(init=False, default=0)  # filter lookups done (the early stop's saving)

    def __post_init__(self) -> None:
        if not self.streams:
            msg = "MCF needs at least one stream"
            raise ConfigError(msg)
        self.filters = {
            s: WindowFilter(
                self.size_us, self.slide_us, self.capacity, self.bucket_size, self.fingerprint_bits
            )
            for s in self.streams
        }

    def add(self, stream: str, ts: IntArray, keys: IntArray) -> int:
        """Insert a stream's tuples."""
        if stream not in self.filters:
            msg = f"unknown stream {stream!r} (known: {', '.join(self.filters)})"
            raise ConfigError(msg)
        return self.filters[stream].add(ts, keys)

    def advance(self, end_us: int) -> None:
        """Slide every stream's window to end at ``end_us``."""
        for f in self.filters.values():
            f.advance(end_us)

    def query(self, keys: IntArray) -> BoolArray:
        """True where a key may be in every stream's current window (no false negatives)."""
        keys = np.asarray(keys, dtype=np.int64)
        alive = np.arange(keys.size)
        for f in self.filters.values():
            if alive.size == 0:
                break
            self.lookups += int(alive.size)
            alive = alive[f.contains(keys[alive])]
        out = np.zeros(keys.size, dtype=bool)
        out[alive] = True
        return out


def present_in_range(
    data: dict[str, tuple[IntArray, IntArray]],
    keys: IntArray,
    lo_us: int,
    hi_us: int,
    size_us: int,
    slide_us: int,
    capacity: int,
    bucket_size: int = 4,
    fingerprint_bits: int = 12,
) -> BoolArray:
    """The seed's MCF query over a time range: may each key be in every stream within ``[lo, hi)``.

    ``data`` maps each stream to (event times, keys). Each stream's window slides from
    ``[lo, lo + size)`` by ``slide`` until it passes ``hi``; a key stops being searched in a stream
    once a window of it may hold the key, and a key absent from some stream is dropped at once.
    """
    if hi_us <= lo_us or lo_us % slide_us:
        msg = f"need a non-empty range starting on a slide boundary, got [{lo_us}, {hi_us}), slide {slide_us}"
        raise ConfigError(msg)
    keys = np.asarray(keys, dtype=np.int64)
    alive = np.ones(keys.size, dtype=bool)
    steps = math.ceil(max(hi_us - lo_us - size_us, 0) / slide_us) + 1
    for ts, ks in data.values():
        ts, ks = np.asarray(ts, dtype=np.int64), np.asarray(ks, dtype=np.int64)
        inside = (ts >= lo_us) & (ts < hi_us)
        ts, ks = ts[inside], ks[inside]
        wf = WindowFilter(size_us, slide_us, capacity, bucket_size, fingerprint_bits)
        found = np.zeros(keys.size, dtype=bool)
        for i in range(steps):
            end = lo_us + size_us + i * slide_us
            wf.advance(end)
            new = (ts >= end - (size_us if i == 0 else slide_us)) & (ts < end)
            wf.add(ts[new], ks[new])
            ask = np.flatnonzero(alive & ~found)
            if ask.size == 0:
                break
            found[ask] = wf.contains(keys[ask])
        alive &= found
        if not alive.any():
            break
    return alive


def keep_shared(
    keys: Sequence[IntArray], method: str, bucket_size: int = 4, fingerprint_bits: int = 16
) -> list[BoolArray]:
    """Per input, True where its key may be held by every *other* input (a multi-way pre-filter).

    ``mcf``: one cuckoo filter per input over its distinct keys, asked in input order with an
    early stop (false positives keep a row the join then drops); ``semi``: the exact key sets.
    The backfill uses it per tumbling window: one window's filters, built where its rows are.

    >>> keys = [np.array([1, 2, 3]), np.array([2, 3, 4]), np.array([3, 2])]
    >>> [k.tolist() for k in keep_shared(keys, "semi")]
    [[False, True, True], [True, True, False], [True, True]]
    """
    if method not in ("mcf", "semi"):
        msg = f"unknown pre-filter {method!r}: use mcf or semi"
        raise ConfigError(msg)
    distinct = [np.unique(np.asarray(k, dtype=np.int64)) for k in keys]
    tests: list[CuckooFilter | IntArray] = []
    for d in distinct:
        if method == "semi":
            tests.append(d)
        else:
            cf = CuckooFilter(max(int(d.size), 1), bucket_size, fingerprint_bits)
            cf.insert(d)
            tests.append(cf)
    out = []
    for i, k in enumerate(keys):
        k = np.asarray(k, dtype=np.int64)
        alive = np.arange(k.size)
        for j, test in enumerate(tests):
            if j == i or alive.size == 0:
                continue
            probe = k[alive]
            hit = test.contains(probe) if isinstance(test, CuckooFilter) else np.isin(probe, test)
            alive = alive[np.asarray(hit, dtype=bool)]
        mask = np.zeros(k.size, dtype=bool)
        mask[alive] = True
        out.append(mask)
    return out
