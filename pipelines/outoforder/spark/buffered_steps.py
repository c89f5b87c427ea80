"""The buffered window operator's two steps as they run in Spark tasks (:mod:`outoforder.spark.buffered`).

Step 1 (:class:`ArrivalStep`) is a kernel of the carried scan over a batch's arrivals; step 2
(:func:`window_task`) runs over the rows of whole ranges of window ids. Both exchange Arrow
record batches of one wide schema whose ``kind`` column says what a row is; the work itself is
:mod:`outoforder.core.windows.batch`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from outoforder.core.joins.progress import NEG
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.batch import (
    LEVEL_KEYS,
    arrival_events,
    scan_fold,
    scan_summary,
    window_step,
)
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.lateness import Profiles, bucket_of

# a watched window's lateness profile, sparse: its non-empty buckets and their count, Σv, min, max
PROFILE_COLUMNS = ("p_bucket", "p_n", "p_s1", "p_lo", "p_hi")


# Rows between the two steps. a: an arrival (seq, ts, v, c_before, t_before, slack); c / o: a window closes /
# is observed at arrival ``at`` (slack, t_max there); b: a value the window received before this
# batch; w: a watched window (n_rcv, n_late, lambda_thr); s: a task's summary.
STEP_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("key", pa.int64()),
        ("wid", pa.int64()),
        ("seq", pa.int64()),
        ("ts", pa.int64()),
        ("v", pa.float64()),
        ("c_before", pa.int64()),
        ("t_before", pa.int64()),
        ("at", pa.int64()),
        ("slack", pa.int64()),
        ("t_max", pa.int64()),
        ("n_rcv", pa.int64()),
        ("n_late", pa.int64()),
        ("lambda_thr", pa.float64()),
        ("k", pa.int64()),
        ("frontier", pa.int64()),
        ("slack_sum", pa.float64()),
    ]
)


# Rows out of the per-window step. e: emitted; l: a late membership; b: a value carried on (window
# still open); w: a window still watched; o: a coverage observation; u: what a window still
# watched needs so far; n: a task's counts of l, b and w rows (in n_late, n_rcv and at).
PROFILE_FIELDS = [
    (c, pa.list_(pa.int64() if c in ("p_bucket", "p_n") else pa.float64())) for c in PROFILE_COLUMNS
]


WINDOW_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("wid", pa.int64()),
        ("seq", pa.int64()),
        ("ts", pa.int64()),
        ("v", pa.float64()),
        ("bucket", pa.int64()),
        ("at", pa.int64()),
        ("slack", pa.int64()),
        ("lag_us", pa.int64()),
        ("n_rcv", pa.int64()),
        ("n_late", pa.int64()),
        ("lambda_thr", pa.float64()),
        ("needed_us", pa.int64()),
        ("s1", pa.float64()),
        ("s2", pa.float64()),
        *PROFILE_FIELDS,
    ]
)


RANGE_WINDOWS = 64  # windows per range of the per-window step's shuffle


def _rows(schema: pa.Schema, kind: str, cols: dict[str, Any]) -> pa.RecordBatch:
    n = len(next(iter(cols.values()))) if cols else 0
    arrays = []
    for f in schema:
        if f.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif f.name in cols and isinstance(cols[f.name], pa.Array):
            arrays.append(cols[f.name])
        elif f.name in cols:
            arrays.append(pa.array(np.asarray(cols[f.name]), f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _sparse_profiles(p: Profiles) -> dict[str, pa.Array]:
    """Profiles as list arrays of their non-empty buckets (:data:`PROFILE_COLUMNS`), one list per row."""
    rows, buckets = np.nonzero(p.n)  # row-major: each row's buckets together, ascending
    offsets = pa.array(np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=p.rows))]), pa.int32())
    flat = {
        "p_bucket": buckets.astype(np.int64),
        "p_n": p.n[rows, buckets],
        "p_s1": p.s1[rows, buckets],
        "p_lo": p.lo[rows, buckets],
        "p_hi": p.hi[rows, buckets],
    }
    return {c: pa.ListArray.from_arrays(offsets, pa.array(flat[c])) for c in PROFILE_COLUMNS}


def dense_profiles(t: pa.Table) -> Profiles:
    """The :class:`Profiles` of rows carrying :data:`PROFILE_COLUMNS` (null lists: no members known)."""
    out = Profiles.empty(t.num_rows)
    if not t.num_rows:
        return out
    lists = {c: t.column(c).combine_chunks() for c in PROFILE_COLUMNS}
    lengths = lists["p_bucket"].value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(t.num_rows), lengths)
    flat = {c: a.flatten().to_numpy(zero_copy_only=False) for c, a in lists.items()}
    b = flat["p_bucket"].astype(np.int64)
    out.n[rows, b] = flat["p_n"].astype(np.int64)
    out.s1[rows, b] = flat["p_s1"].astype(np.float64)
    out.lo[rows, b] = flat["p_lo"].astype(np.float64)
    out.hi[rows, b] = flat["p_hi"].astype(np.float64)
    return out


class ArrivalStep:
    """Step 1 as a :class:`~outoforder.spark.scan.ScanKernel`."""

    level_keys = LEVEL_KEYS

    def __init__(self, windows: Windows, horizon_us: int, rule: str | int | float) -> None:
        self.windows, self.horizon_us, self.rule = windows, horizon_us, rule

    def summarize(self, level: int, cols: dict[str, Any], carry: dict[str, Any]) -> dict[str, Any]:
        """Level ``level``'s summary of one range, given the carries of the lower levels."""
        return scan_summary(level, cols["ts"], carry, self.rule, cols.get("slack"))

    def fold(self, level: int, carry: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
        """The carry after a range, from the carry before it and the range's level summary."""
        return scan_fold(level, carry, summary)

    def finish(self, cols: dict[str, Any], carry: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        """A range's arrivals and the windows closing or observed at them, as step 2's rows."""
        if not cols:
            return
        seq, ts, v = cols["seq"].astype(np.int64), cols["ts"].astype(np.int64), cols["v"].astype(np.float64)
        ev = arrival_events(ts, carry, self.rule, self.windows, self.horizon_us, cols.get("slack"))
        st = ev.state
        r = RANGE_WINDOWS
        first = self.windows.first_id(ts) // r
        spans = self.windows.last_id(ts) // r - first + 1  # the ranges an arrival's windows fall in
        idx = np.repeat(np.arange(ts.size), spans)
        key = np.repeat(first, spans) + np.arange(idx.size) - np.repeat(np.cumsum(spans) - spans, spans)
        yield _rows(
            STEP_SCHEMA,
            "a",
            {
                "key": key,
                "seq": seq[idx],
                "ts": ts[idx],
                "v": v[idx],
                "c_before": st["c_before"][idx],
                "t_before": st["t_before"][idx],
                "slack": st["slack"][idx],
            },
        )
        at = ev.close
        yield _rows(
            STEP_SCHEMA,
            "c",
            {
                "key": ev.close_wid // r,
                "wid": ev.close_wid,
                "at": seq[at],
                "slack": st["slack"][at],
                "t_max": st["t_max"][at],
            },
        )
        yield _rows(
            STEP_SCHEMA, "o", {"key": ev.observe_wid // r, "wid": ev.observe_wid, "at": seq[ev.observe]}
        )
        yield _rows(
            STEP_SCHEMA,
            "s",
            {
                "seq": [int(seq[-1])],
                "n_rcv": [ts.size],
                "t_max": [int(st["t_max"][-1])],
                "k": [int(st["k"][-1])],
                "frontier": [int(st["c"][-1])],
                "slack": [int(st["slack"][-1])],
                "slack_sum": [float(st["slack"].sum())],
            },
        )


def window_task(
    batches: Iterator[pa.RecordBatch], query: WindowQuery, flush: tuple[int, int, int] | None
) -> Iterator[pa.RecordBatch]:
    """Step 2 over the rows of whole window ranges (any number of them)."""
    got = [b for b in batches if b.num_rows]
    if not got:
        return
    t = pa.Table.from_batches(got)
    cols = {
        name: t.column(name).to_numpy(zero_copy_only=False)
        for name in t.column_names
        if name not in PROFILE_COLUMNS
    }
    kind = cols["kind"]
    w = query.windows
    arr = kind == "a"
    idx, wid = w.explode(cols["ts"][arr].astype(np.int64))
    mine = wid // RANGE_WINDOWS == cols["key"][arr][idx]  # an arrival sent to two ranges counts in each once
    idx, wid = idx[mine], wid[mine]
    c_before = cols["c_before"][arr][idx].astype(np.int64)
    late = (c_before != NEG) & (w.end_of(wid) <= c_before)
    # NEG (nothing before the arrival) lies far below any end: bucket 0
    bucket = bucket_of(cols["t_before"][arr][idx].astype(np.int64) - w.end_of(wid))
    carried = kind == "b"

    def col(name: str, sel: npt.NDArray[np.bool_], dtype: Any) -> npt.NDArray[Any]:
        picked: npt.NDArray[Any] = cols[name][sel].astype(dtype)
        return picked

    members = {
        "wid": np.concatenate([col("wid", carried, np.int64), wid]),
        "seq": np.concatenate([col("seq", carried, np.int64), cols["seq"][arr][idx].astype(np.int64)]),
        "ts": np.concatenate([col("ts", carried, np.int64), cols["ts"][arr][idx].astype(np.int64)]),
        "v": np.concatenate([col("v", carried, np.float64), cols["v"][arr][idx].astype(np.float64)]),
        "late": np.concatenate([np.zeros(int(carried.sum()), dtype=bool), late]),
        "c_before": np.concatenate([np.full(int(carried.sum()), NEG, dtype=np.int64), c_before]),
        # a value carried from a state written before buckets were kept: counted as on time
        "bucket": np.concatenate([np.nan_to_num(cols["bucket"][carried].astype(np.float64)), bucket]).astype(
            np.int64
        ),
    }
    watched = kind == "w"
    closes, observes = kind == "c", kind == "o"
    out = window_step(
        aggregate=query.aggregate,
        eps=query.eps,
        delta=query.delta,
        windows=w,
        horizon_us=query.coverage_horizon_us,
        members=members,
        watch={
            "wid": col("wid", watched, np.int64),
            "n_rcv": col("n_rcv", watched, np.int64),
            "n_late": col("n_late", watched, np.int64),
            "lambda_thr": col("lambda_thr", watched, np.float64),
        },
        watch_profiles=dense_profiles(t.filter(pa.array(watched))),
        close={
            "wid": col("wid", closes, np.int64),
            "at": col("at", closes, np.int64),
            "slack": col("slack", closes, np.int64),
            "t_max": col("t_max", closes, np.int64),
        },
        observe={"wid": col("wid", observes, np.int64), "at": col("at", observes, np.int64)},
        flush=flush,
    )
    e = out.emitted
    yield _rows(
        WINDOW_SCHEMA,
        "e",
        {
            "wid": e["wid"],
            "v": e["value"],
            "n_rcv": e["n_rcv"],
            "at": e["emitted_at"],
            "slack": e["slack_at_close"],
            "lag_us": e["lag_us"],
            "lambda_thr": e["lambda_thr"],
            "s1": e["s1"],
            "s2": e["s2"],
        },
    )
    yield _rows(WINDOW_SCHEMA, "l", out.late)
    yield _rows(WINDOW_SCHEMA, "b", out.buffer)
    yield _rows(WINDOW_SCHEMA, "w", {**out.watch, **_sparse_profiles(out.watch_profiles)})
    yield _rows(WINDOW_SCHEMA, "u", out.unsettled)
    yield _rows(
        WINDOW_SCHEMA,
        "n",
        {"n_late": [out.late["seq"].size], "n_rcv": [out.buffer["seq"].size], "at": [out.watch["wid"].size]},
    )
    o = out.observed
    yield _rows(
        WINDOW_SCHEMA,
        "o",
        {
            "wid": o["wid"],
            "at": o["obs_at"],
            "n_rcv": o["n_rcv"],
            "n_late": o["n_late"],
            "lambda_thr": o["lambda_thr"],
            "needed_us": o["needed_us"],
        },
    )


def gap_maxima(batches: Iterator[pa.RecordBatch], cuts: npt.NDArray[np.int64]) -> Iterator[pa.RecordBatch]:
    """The largest ts of the rows between consecutive ``cuts`` (g: how many cuts lie at or below seq)."""
    for b in batches:
        if not b.num_rows:
            continue
        seq, ts = (b.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in ("seq", "ts"))
        g, inv = np.unique(np.searchsorted(cuts, seq, side="right"), return_inverse=True)
        top = np.full(g.size, NEG, dtype=np.int64)
        np.maximum.at(top, inv, ts)
        yield pa.RecordBatch.from_arrays([pa.array(g), pa.array(top)], names=["g", "top"])
