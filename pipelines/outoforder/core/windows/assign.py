"""Sliding windows on event time: ``[start, start + size)`` with ``start = id · slide``.

Windows are half-open and aligned to the epoch (id 0 starts at ts 0), so a window id is stable
whatever data is seen first. A tuple at ``ts`` belongs to every window whose start lies in
``(ts - size, ts]``: ids ``floor((ts - size) / slide) + 1`` up to ``floor(ts / slide)``, i.e.
``ceil(size / slide)`` windows when the slide divides the size.

>>> w = Windows(size_us=500_000, slide_us=100_000)
>>> w.ids_of(1_234_567).tolist()
[8, 9, 10, 11, 12]
>>> w.bounds(12)
(1200000, 1700000)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Windows:
    """Window size and slide (µs)."""

    size_us: int
    slide_us: int

    def __post_init__(self) -> None:
        if self.slide_us <= 0 or self.size_us <= 0:
            msg = f"window size and slide must be > 0 µs, got size {self.size_us}, slide {self.slide_us}"
            raise ConfigError(msg)
        if self.slide_us > self.size_us:
            msg = f"slide ({self.slide_us}) > size ({self.size_us}) leaves gaps: use a tumbling window"
            raise ConfigError(msg)

    def first_id(self, ts: IntArray | int) -> IntArray:
        """The earliest window containing ``ts``."""
        return np.floor_divide(np.asarray(ts, dtype=np.int64) - self.size_us, self.slide_us) + 1

    def last_id(self, ts: IntArray | int) -> IntArray:
        """The latest window containing ``ts``."""
        return np.floor_divide(np.asarray(ts, dtype=np.int64), self.slide_us)

    def ids_of(self, ts: int) -> IntArray:
        """Every window containing one timestamp, ascending."""
        return np.arange(int(self.first_id(ts)), int(self.last_id(ts)) + 1, dtype=np.int64)

    def bounds(self, window_id: int) -> tuple[int, int]:
        """``[start, end)`` of a window."""
        start = window_id * self.slide_us
        return start, start + self.size_us

    def last_closed(self, progress_us: float) -> int:
        """The newest window whose end is at or before ``progress_us`` (scalar, no numpy).

        >>> Windows(size_us=10, slide_us=5).last_closed(24.5)
        2
        """
        return math.floor((progress_us - self.size_us) / self.slide_us)

    def end_of(self, window_id: IntArray | int) -> IntArray:
        """Window ends (exclusive), vectorised."""
        return np.asarray(window_id, dtype=np.int64) * self.slide_us + self.size_us

    def explode(self, ts: IntArray) -> tuple[IntArray, IntArray]:
        """(tuple index, window id) for every membership, vectorised; ordered by tuple then window."""
        ts = np.asarray(ts, dtype=np.int64)
        first, last = self.first_id(ts), self.last_id(ts)
        counts = (last - first + 1).astype(np.int64)
        idx = np.repeat(np.arange(ts.size, dtype=np.int64), counts)
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        offset = np.arange(idx.size, dtype=np.int64) - starts
        return idx, np.repeat(first, counts) + offset
