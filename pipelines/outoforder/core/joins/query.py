"""The join query, its input in arrival order, the predicate and the exact (ground-truth) join.

A join input is one arrival sequence of two streams, R (side 0) and S (side 1): for arrival
``i``, ``side[i]``, ``ts[i]`` (event time, µs) and the attributes the predicate reads. Result pairs
are identified by arrival indices ``(r, s)``. The query: ``|r.ts - s.ts| <= w`` and either
``distance(r, s) <= theta`` (Euclidean, on x/y) or ``r.key == s.key``.

>>> q = JoinQuery(window_us=2, theta=5.0)
>>> inp = JoinInput.from_rows([(0, 10, 0.0, 0.0), (1, 11, 3.0, 4.0), (1, 20, 0.0, 0.0)])
>>> exact_join(inp, q).tolist()
[[0, 1]]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from outoforder.errors import ConfigError

R, S = 0, 1
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
PairArray = npt.NDArray[np.int64]  # shape (n, 2): (r index, s index), sorted


@dataclass(frozen=True)
class JoinQuery:
    """``|r.ts - s.ts| <= window_us`` and the predicate (``distance <= theta`` or equal keys)."""

    window_us: int
    theta: float = 5.0
    predicate: Literal["distance", "key"] = "distance"

    def __post_init__(self) -> None:
        if self.window_us < 0:
            msg = f"window must be >= 0 µs, got {self.window_us}"
            raise ConfigError(msg)
        if self.predicate not in ("distance", "key"):
            msg = f"predicate must be 'distance' or 'key', got {self.predicate!r}"
            raise ConfigError(msg)
        if self.predicate == "distance" and not self.theta >= 0:
            msg = f"theta must be >= 0, got {self.theta}"
            raise ConfigError(msg)

    def matches(self, a: tuple[int, float, float, int], b: tuple[int, float, float, int]) -> bool:
        """Scalar test of one pair of (ts, x, y, key) tuples (the reference operators use it)."""
        if abs(a[0] - b[0]) > self.window_us:
            return False
        if self.predicate == "key":
            return a[3] == b[3]
        dx, dy = a[1] - b[1], a[2] - b[2]
        return dx * dx + dy * dy <= self.theta * self.theta

    def matches_many(self, inp: JoinInput, i: IntArray, j: IntArray) -> npt.NDArray[np.bool_]:
        """Vectorised test of candidate pairs ``(i[k], j[k])`` (same arithmetic as :meth:`matches`)."""
        ok: npt.NDArray[np.bool_] = np.abs(inp.ts[i] - inp.ts[j]) <= self.window_us
        if self.predicate == "key":
            same: npt.NDArray[np.bool_] = inp.key[i] == inp.key[j]
            return ok & same
        dx = inp.x[i] - inp.x[j]
        dy = inp.y[i] - inp.y[j]
        near: npt.NDArray[np.bool_] = dx * dx + dy * dy <= self.theta * self.theta
        return ok & near


@dataclass(frozen=True)
class JoinInput:
    """Two streams interleaved in arrival order (index = arrival position)."""

    side: IntArray
    ts: IntArray
    x: FloatArray
    y: FloatArray
    key: IntArray

    def __post_init__(self) -> None:
        n = self.side.size
        if any(a.size != n for a in (self.ts, self.x, self.y, self.key)):
            msg = "join input columns differ in length"
            raise ConfigError(msg)
        if n and not np.isin(self.side, (R, S)).all():
            msg = "side must be 0 (R) or 1 (S)"
            raise ConfigError(msg)

    def __len__(self) -> int:
        return int(self.side.size)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[float]]) -> JoinInput:
        """From (side, ts[, x, y[, key]]) rows in arrival order."""
        side, ts, x, y, key = [], [], [], [], []
        for row in rows:
            side.append(int(row[0]))
            ts.append(int(row[1]))
            x.append(float(row[2]) if len(row) > 2 else 0.0)
            y.append(float(row[3]) if len(row) > 3 else 0.0)
            key.append(int(row[4]) if len(row) > 4 else 0)
        return cls(
            np.array(side, np.int64),
            np.array(ts, np.int64),
            np.array(x, np.float64),
            np.array(y, np.float64),
            np.array(key, np.int64),
        )

    def row(self, i: int) -> tuple[int, float, float, int]:
        """(ts, x, y, key) of arrival ``i``."""
        return int(self.ts[i]), float(self.x[i]), float(self.y[i]), int(self.key[i])


def sort_pairs(pairs: PairArray) -> PairArray:
    """Pairs in (r, s) order, as an (n, 2) int64 array."""
    p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return p[np.lexsort((p[:, 1], p[:, 0]))]


def _buckets(inp: JoinInput, query: JoinQuery) -> tuple[IntArray, list[IntArray]]:
    """A bucket per tuple and, per neighbour offset, the bucket each tuple must look in.

    Key equality: the key itself. Distance <= theta: square cells of side theta, the 3 x 3 cells
    around a tuple's own (any pair within theta lies in neighbouring cells). Buckets are dense
    ints; a neighbour cell nobody occupies maps to -1.
    """
    if query.predicate == "key":
        uniq, inv = np.unique(inp.key, return_inverse=True)
        own = inv.astype(np.int64)
        return own, [own]
    size = query.theta if query.theta > 0 else 1.0
    cx = np.floor(inp.x / size).astype(np.int64)
    cy = np.floor(inp.y / size).astype(np.int64)
    span = int(cy.max() - cy.min() + 3) if cy.size else 1
    base_y = int(cy.min()) - 1 if cy.size else 0
    code = cx * span + (cy - base_y)
    uniq, inv = np.unique(code, return_inverse=True)
    around = []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            c = code + dx * span + dy
            pos = np.searchsorted(uniq, c)
            pos_c = np.minimum(pos, max(uniq.size - 1, 0))
            around.append(np.where((uniq.size > 0) & (uniq[pos_c] == c), pos_c, -1).astype(np.int64))
    return inv.astype(np.int64), around


def exact_join(inp: JoinInput, query: JoinQuery, chunk_candidates: int = 4_000_000) -> PairArray:
    """Every pair satisfying the query, whatever the arrival order: the ground truth.

    Tuples are bucketed (by key, or by theta-sized cells), S is sorted by (bucket, ts), and each R
    tuple binary-searches its time window in each neighbouring bucket; candidates are expanded in
    chunks of bounded size and filtered by the exact predicate.
    """
    r_idx = np.flatnonzero(inp.side == R)
    s_idx = np.flatnonzero(inp.side == S)
    if r_idx.size == 0 or s_idx.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    own, around = _buckets(inp, query)
    t0 = int(inp.ts.min())
    span = int(inp.ts.max()) - t0 + 2 * query.window_us + 2
    s_key = own[s_idx] * span + (inp.ts[s_idx] - t0)
    order = np.argsort(s_key, kind="stable")
    s_sorted, s_key = s_idx[order], s_key[order]
    out: list[PairArray] = []
    for nb in around:
        bucket = nb[r_idx]
        has = bucket >= 0
        rr_all = r_idx[has]
        base = bucket[has] * span + (inp.ts[rr_all] - t0)
        lo = np.searchsorted(s_key, base - query.window_us, side="left")
        hi = np.searchsorted(s_key, base + query.window_us, side="right")
        out += _expand(inp, query, rr_all, s_sorted, lo, hi, chunk_candidates)
    pairs = np.concatenate(out) if out else np.zeros((0, 2), np.int64)
    return sort_pairs(pairs)


def _expand(
    inp: JoinInput,
    query: JoinQuery,
    r_idx: IntArray,
    s_sorted: IntArray,
    lo: IntArray,
    hi: IntArray,
    chunk_candidates: int,
) -> list[PairArray]:
    counts = hi - lo
    cum = np.cumsum(counts)
    out: list[PairArray] = []
    start = 0
    while start < r_idx.size:
        base = int(cum[start - 1]) if start else 0
        stop = max(int(np.searchsorted(cum, base + chunk_candidates, side="right")), start + 1)
        c = counts[start:stop]
        total = int(c.sum())
        if total:
            rr = np.repeat(r_idx[start:stop], c)
            offsets = np.arange(total) - np.repeat(np.cumsum(c) - c, c)
            ss = s_sorted[np.repeat(lo[start:stop], c) + offsets]
            keep = query.matches_many(inp, rr, ss)
            out.append(np.column_stack([rr[keep], ss[keep]]))
        start = stop
    return out
