"""Top-k per sliding window on Spark: exact, as a cache of duration K emits it, and the stream operator.

The DataFrame twins of :func:`outoforder.core.topk.reference.exact_topk` and
:func:`~outoforder.core.topk.reference.topk_at_cache` (the differential tests hold them equal).
Input columns: ``seq`` (arrival order, also the tuple id that breaks score ties), ``ts`` (event
time, µs) and ``score``. Output: one row per (window, rank) with ``window_id``, ``rank`` (1 =
best), ``seq``, ``ts`` and ``score``.

The cache form needs, per window, the arrival at which the stream's progress first reaches
``end + K``. Progress passes ``end(w) + K`` at the first arrival whose own event time does, so the
emission of window ``w`` is ``min(seq)`` over the tuples whose *last due window*
``floor((ts − K − size) / slide)`` is ``>= w``: a minimum per due window followed by a suffix
minimum over the (few) distinct due windows, without ordering the whole stream.

:func:`operator_step` runs the stream operator itself over one interval of arrivals in a Spark
task, so that the arrivals never pass through the driver.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from outoforder.core.protocol import Arrival
from outoforder.core.topk.cache import CacheSettings, LatenessSettings
from outoforder.core.topk.operator import TopK, TopKQuery
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError
from outoforder.spark.rows import arrow_schema
from outoforder.spark.windows import memberships, pane_start


def _ranked(members: DataFrame, k: int) -> DataFrame:
    if k < 1:
        msg = f"k must be >= 1, got {k}"
        raise ConfigError(msg)
    order = Window.partitionBy("window_id").orderBy(F.col("score").desc(), F.col("seq").asc())
    return (
        members.withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") <= k)
        .select("window_id", "rank", "seq", "ts", "score")
    )


def _members(df: DataFrame, windows: Windows) -> DataFrame:
    return df.select("seq", "ts", "score", F.explode(memberships(df, windows)).alias("window_id"))


def window_topk(df: DataFrame, windows: Windows, k: int) -> DataFrame:
    """The exact top-k of every window holding a tuple (score descending, then seq ascending).

    Two rankings instead of one over every membership: first the top-k of every *pane* (the
    ``gcd(size, slide)`` slices every window is made of), then the top-k of every window over its
    panes' top-k. Exact, because the order is total (``seq`` breaks ties): a tuple among a window's
    k best is among its pane's k best. A tuple belongs to ``size / slide`` windows (12 for a minute
    sliding by 5 s) but only the panes' k best are copied to each window.
    """
    best = _ranked(
        df.select("seq", "ts", "score", pane_start(F.col("ts"), windows).alias("window_id")), k
    ).withColumnRenamed("window_id", "start")
    return _ranked(
        best.select("seq", "ts", "score", F.explode(memberships(best, windows, "start")).alias("window_id")),
        k,
    )


def _due_window(ts: Column, windows: Windows, cache_us: int) -> Column:
    """The last window whose ``end + K`` an event time reaches."""
    return F.floor((ts - F.lit(cache_us + windows.size_us)) / F.lit(windows.slide_us)).cast("long")


def emission_seqs(df: DataFrame, windows: Windows, cache_us: int) -> DataFrame:
    """``(window_id, emit_seq)`` for every window holding a tuple: the arrival that emits it.

    ``emit_seq`` is null when the stream never passes the window (it is emitted at the end).
    """
    per_due = df.groupBy(_due_window(F.col("ts"), windows, cache_us).alias("key")).agg(
        F.min("seq").alias("first_seq")
    )
    ids = _members(df, windows).select(F.col("window_id").alias("key")).distinct()
    keys = per_due.withColumn("is_window", F.lit(False)).unionByName(
        ids.withColumn("first_seq", F.lit(None).cast("long")).withColumn("is_window", F.lit(True))
    )
    # min over due windows >= the key; RANGE frames include equal keys. One row per distinct
    # window or due value, so a global window is cheap.
    later = Window.orderBy(F.col("key").desc()).rangeBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        keys.select(
            F.col("key").alias("window_id"), F.min("first_seq").over(later).alias("emit_seq"), "is_window"
        )
        .where("is_window")
        .drop("is_window")
    )


def cache_topk(df: DataFrame, windows: Windows, k: int, cache_us: int) -> DataFrame:
    """What a cache of ``cache_us`` emits per window: the top-k of the members that arrived before.

    Windows emitted before any of their tuples arrived have no rows (the reference's empty list).
    """
    if cache_us < 0:
        msg = f"cache duration must be >= 0, got {cache_us}"
        raise ConfigError(msg)
    seen = (
        _members(df, windows)
        .join(emission_seqs(df, windows, cache_us), "window_id", "left")
        .where(F.col("emit_seq").isNull() | (F.col("seq") < F.col("emit_seq")))
    )
    return _ranked(seen.drop("emit_seq"), k)


def as_lists(rows: DataFrame) -> dict[int, list[int]]:
    """Collect a ranked frame into the reference's ``{window id: [seq, ...]}`` (small results only)."""
    out: dict[int, list[int]] = {}
    for r in rows.orderBy("window_id", "rank").collect():
        out.setdefault(int(r["window_id"]), []).append(int(r["seq"]))
    return out


# Rows of one run of the operator: w an emitted window (a = window end, b = size, seq = the arrival
# that emitted it, x = K in force), r a result (a = rank), l a late membership (a = ts, x = score),
# c a cache decision (seq = the arrival after which it was made, a = progress, x/y/z = K_min, K_down,
# K_up, text = {"move", "accuracy", "needed_us", "reachable"}), q a settled window (a = window end,
# x = hit rate, y = K for an exact list, z = awaited, text = {"cache_us", "lateness"}), s the new
# state and the figures, with the number of rows of each other kind (text, JSON; one row).
STEP_SCHEMA = (
    "kind string, window_id long, seq long, a long, b long, x double, y double, z double, text string"
)


def operator_step(
    batch: DataFrame, query: TopKQuery, cache: LatenessSettings | CacheSettings | float, snapshot: str | None
) -> DataFrame:
    """The operator over one interval's arrivals (``seq``, ``ts``, ``score``) in a Spark task.

    The operator is a state machine over one arrival order, so the interval runs in one task, in
    arrival order, from ``snapshot`` (:meth:`~outoforder.core.topk.operator.TopK.snapshot` as JSON;
    None: a fresh operator). Its output rows are :data:`STEP_SCHEMA`; the driver receives only the
    one ``s`` row (the new state, small by construction: k entries per open window) and writes the
    others from the executors. Lazy: cache or checkpoint it.
    """
    run = functools.partial(_operator_task, query=query, cache=cache, snapshot=snapshot)
    return batch.select("seq", "ts", "score").coalesce(1).mapInArrow(run, STEP_SCHEMA)


def run_operator(
    seq: np.ndarray[Any, Any], ts: np.ndarray[Any, Any], score: np.ndarray[Any, Any], op: TopK
) -> list[dict[str, Any]]:
    """Arrivals in arrival order through ``op``; the :data:`STEP_SCHEMA` rows it produced (no ``s`` row)."""
    batch = [
        Arrival(int(q), int(t), float(v))
        for q, t, v in zip(seq.tolist(), ts.tolist(), score.tolist(), strict=True)
    ]
    ranked = [a for a in batch if not math.isnan(a.value)]  # the operator's arrival index counts these
    first, decided = op.op.index, len(op.op.decisions)
    out = op.process(batch)
    w = op.query.windows
    rows: list[dict[str, Any]] = []
    for e in out.emitted:
        rows.append({"kind": "w", "window_id": e.window_id, "seq": ranked[e.at_index - first].id,
                     "a": w.bounds(e.window_id)[1], "b": len(e.tids), "x": e.cache_us})  # fmt: skip
        rows += [
            {"kind": "r", "window_id": e.window_id, "a": r, "seq": t} for r, t in enumerate(e.tids, start=1)
        ]
    score_of = {a.id: a.value for a in ranked}
    rows += [
        {"kind": "l", "window_id": x.window, "seq": x.id, "a": x.ts, "x": score_of[x.id]} for x in out.late
    ]
    for d, (at, progress) in zip(op.op.decisions[decided:], op.op.decided_at[decided:], strict=True):
        text = json.dumps({"move": d.move, "accuracy": [float(v) for v in d.accuracies],
                           "needed_us": _finite(d.needed_us), "reachable": d.reachable})  # fmt: skip
        rows.append({"kind": "c", "seq": ranked[at - first].id, "a": int(progress), "x": d.k_min_us,
                     "y": d.k_down_us, "z": d.k_up_us, "text": text})  # fmt: skip
    rows += [
        {"kind": "q", "window_id": x.window_id, "a": w.bounds(x.window_id)[1], "x": x.hit, "y": x.exact_us,
         "z": x.awaited_us, "text": json.dumps({"cache_us": x.cache_us, "lateness": list(x.lateness)})}
        for x in out.settled
    ]  # fmt: skip
    return rows


def _finite(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


def _operator_task(
    it: Iterator[pa.RecordBatch],
    query: TopKQuery,
    cache: LatenessSettings | CacheSettings | float,
    snapshot: str | None,
) -> Iterator[pa.RecordBatch]:
    received = [b for b in it if b.num_rows]
    table = pa.Table.from_batches(received).sort_by("seq") if received else None
    op = TopK(query, cache)
    if snapshot is not None:
        op.restore(json.loads(snapshot))
    if table is None:
        cols = [np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)]
    else:
        # a null score becomes NaN: not ranked, counted
        cols = [table.column(c).to_numpy(zero_copy_only=False) for c in ("seq", "ts", "score")]
        cols[2] = cols[2].astype(np.float64)
    rows = run_operator(cols[0], cols[1], cols[2], op)
    figures: dict[str, Any] = {
        "arrivals": int(cols[0].size),
        "unscored": int(np.isnan(cols[2]).sum()),
        "rows": {kind: sum(r["kind"] == kind for r in rows) for kind in "wrlcq"},  # what is to be written
    }
    last = op.op.decisions[-1] if op.op.decisions else None  # the newest statement of this run
    state = {"snapshot": op.snapshot(), "figures": figures, "k_min_us": float(op.op.cache.k_min_us),
             "state_rows": op.op.state_rows, "candidates": op.op.candidate_count,
             "needed_us": None if last is None else _finite(last.needed_us),
             "reachable": None if last is None else last.reachable}  # fmt: skip
    rows.append({"kind": "s", "text": json.dumps(state)})
    yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema(STEP_SCHEMA))
