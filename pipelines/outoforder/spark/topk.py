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

:func:`topk_pass` runs the stream operator itself over a pass's arrivals in a Spark task, so that
the arrivals never pass through the driver.
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


# The pass's output rows, ``kind`` saying what a row is: "r" a member of an emitted window's list
# (rank, seq, ts, score; at_seq / at_us the arrival that emitted it, x = K in force; a window emitted
# empty is one row with a null rank); "l" a late membership (seq, ts, score, at_us its arrival time);
# "c" a cache decision (at_seq / at_us, a = progress, x/y/z = K_min, K_down, K_up, text = {"move",
# "accuracy", "needed_us", "reachable"}); "q" a window settled (seq / at_us the arrival at which it
# settled, x = hit rate, y = K for an exact list, z = awaited, text = {"cache_us", "lateness"}); "s"
# the new state and the figures (JSON, one row); "x" arrivals out of order (the driver raises it).
PASS_SCHEMA = (
    "kind string, window_id long, window_end_us long, size long, rank long, seq long, ts long, "
    "score double, at_seq long, at_us long, a long, x double, y double, z double, text string"
)


def topk_pass(
    arrivals: DataFrame,
    query: TopKQuery,
    cache: LatenessSettings | CacheSettings | float,
    snapshot: str | None,
) -> DataFrame:
    """The operator over a pass's arrivals (``seq``, ``ts``, ``score``, ``arrival_ts``) in one Spark task.

    The operator is a state machine over one arrival order, so the pass runs in one task, the
    arrivals sorted by Spark, from ``snapshot`` (:meth:`~outoforder.core.topk.operator.TopK.snapshot`
    as JSON; None: a fresh operator). Its output rows are :data:`PASS_SCHEMA`; the driver learns
    only the ``s`` row (observed on the job that checkpoints the output). Lazy: checkpoint it.
    """
    run = functools.partial(_pass_task, query=query, cache=cache, snapshot=snapshot)
    return (
        arrivals.select("seq", "ts", "score", "arrival_ts")
        .repartition(1)
        .sortWithinPartitions("seq")
        .mapInArrow(run, PASS_SCHEMA)
    )


def run_operator(
    seq: np.ndarray[Any, Any],
    ts: np.ndarray[Any, Any],
    score: np.ndarray[Any, Any],
    arrived: np.ndarray[Any, Any],
    op: TopK,
) -> list[dict[str, Any]]:
    """Arrivals in arrival order through ``op``; the :data:`PASS_SCHEMA` rows it produced (no ``s`` row)."""
    batch = [
        Arrival(int(q), int(t), float(v))
        for q, t, v in zip(seq.tolist(), ts.tolist(), score.tolist(), strict=True)
    ]
    ranked = [i for i, a in enumerate(batch) if not math.isnan(a.value)]  # the operator's index counts these
    first, decided = op.op.index, len(op.op.decisions)
    out = op.process(batch)
    w = op.query.windows
    rows: list[dict[str, Any]] = []

    def arrival(index: int) -> tuple[int, int]:
        i = ranked[index - first]
        return int(seq[i]), int(arrived[i])

    for e in out.emitted:
        at_seq, at_us = arrival(e.at_index)
        head = {
            "window_id": e.window_id,
            "window_end_us": w.bounds(e.window_id)[1],
            "size": len(e.tids),
            "at_seq": at_seq,
            "at_us": at_us,
            "x": e.cache_us,
        }
        if not e.tids:
            rows.append({"kind": "r", **head})
        rows += [
            {"kind": "r", **head, "rank": r, "seq": t, "ts": tt, "score": sc}
            for r, (t, tt, sc) in enumerate(zip(e.tids, e.times, e.scores, strict=True), start=1)
        ]
    where = {int(q): i for i, q in enumerate(seq.tolist())}
    rows += [
        {
            "kind": "l",
            "window_id": x.window,
            "seq": x.id,
            "ts": x.ts,
            "score": float(score[where[x.id]]),
            "at_us": int(arrived[where[x.id]]),
        }
        for x in out.late
    ]
    for d, (at, progress) in zip(op.op.decisions[decided:], op.op.decided_at[decided:], strict=True):
        at_seq, at_us = arrival(at)
        text = json.dumps(
            {
                "move": d.move,
                "accuracy": [float(v) for v in d.accuracies],
                "needed_us": _finite(d.needed_us),
                "reachable": d.reachable,
            }
        )
        rows.append(
            {
                "kind": "c",
                "at_seq": at_seq,
                "at_us": at_us,
                "a": int(progress),
                "x": d.k_min_us,
                "y": d.k_down_us,
                "z": d.k_up_us,
                "text": text,
            }
        )
    rows += [
        {
            "kind": "q",
            "window_id": x.window_id,
            "window_end_us": w.bounds(x.window_id)[1],
            "x": x.hit,
            "y": x.exact_us,
            "z": x.awaited_us,
            "seq": at,
            "at_us": int(arrived[where[at]]),
            "text": json.dumps({"cache_us": x.cache_us, "lateness": list(x.lateness)}),
        }
        for x, at in zip(out.settled, out.settled_at, strict=True)
    ]
    return rows


def _finite(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


def _pass_task(
    it: Iterator[pa.RecordBatch],
    query: TopKQuery,
    cache: LatenessSettings | CacheSettings | float,
    snapshot: str | None,
) -> Iterator[pa.RecordBatch]:
    op = TopK(query, cache)
    last: int | None = None
    if snapshot is not None:
        snap = json.loads(snapshot)
        op.restore(snap["operator"])
        last = snap.get("last_seq")
    figures: dict[str, Any] = {
        "arrivals": 0,
        "unscored": 0,
        "windows": 0,
        "rows": dict.fromkeys("rlcq", 0),
        "last_seq": last,
    }
    schema = arrow_schema(PASS_SCHEMA)
    for b in it:
        if not b.num_rows:
            continue
        cols = [b.column(c).to_numpy(zero_copy_only=False) for c in ("seq", "ts", "score", "arrival_ts")]
        cols[2] = cols[2].astype(np.float64)  # a null score becomes NaN: not ranked, counted
        if last is not None and int(cols[0][0]) <= last:
            text = f"arrival {int(cols[0][0])} comes after {last}: arrival order and time disagree"
            yield pa.RecordBatch.from_pylist([{"kind": "x", "text": text}], schema=schema)
            return
        last = int(cols[0][-1])
        rows = run_operator(cols[0], cols[1], cols[2], cols[3], op)
        figures["arrivals"] += int(cols[0].size)
        figures["unscored"] += int(np.isnan(cols[2]).sum())
        for r in rows:
            figures["rows"][r["kind"]] += 1
            figures["windows"] += r["kind"] == "r" and r.get("rank") in (None, 1)
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)
    figures["last_seq"] = last
    newest = op.op.decisions[-1] if op.op.decisions else None  # the newest statement
    state = {
        "scalars": {"operator": op.snapshot(), "last_seq": last},
        "figures": {
            **figures,
            "kept": op.op.state_rows,
            "k_min_us": float(op.op.cache.k_min_us),
            "candidates": op.op.candidate_count,
            "needed_us": None if newest is None else _finite(newest.needed_us),
            "reachable": None if newest is None else newest.reachable,
        },
    }
    yield pa.RecordBatch.from_pylist([{"kind": "s", "text": json.dumps(state)}], schema=schema)
