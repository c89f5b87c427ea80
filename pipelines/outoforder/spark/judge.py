"""The checks' ground truth in Spark tasks: one shuffle, one row per period or window to the driver.

A check compares what a stream stage stored with the exact answer over bronze. The exact answer
is the heavy part (every tuple of the judged event time); everything else a check reads is small
and read on the driver (:mod:`outoforder.io.deltars`). Each function here groups the tuples by a
*chunk* of event time (a period of the join, a run of consecutive windows), copying a tuple to
the next chunk only when its reach crosses into it, and judges each chunk with the pure
reference code in one Arrow task: a check costs one shuffle and one collect (two Spark jobs),
whatever the history, and a full check over the whole history spreads over the cluster by chunk.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.core.joins.query import JoinInput, JoinQuery, exact_join
from outoforder.core.topk.reference import exact_topk
from outoforder.core.windows.aggregate import grouped_aggregates, parse_aggregate
from outoforder.core.windows.assign import Windows

# windows a chunk of the aggregate and top-k checks holds: enough that a tuple is copied to a
# second chunk only near a chunk's edge, few enough that a chunk's tuples fit one task
CHUNK_WINDOWS = 256


def _chunks(ts: Column, lo_us: int, hi_us: int, origin_us: int, chunk_us: int) -> Column:
    """The chunks (of ``chunk_us`` from ``origin_us``) that event times ``[ts + lo, ts + hi]`` meet."""
    first = F.floor((ts + F.lit(lo_us) - F.lit(origin_us)) / F.lit(chunk_us)).cast("long")
    last = F.floor((ts + F.lit(hi_us) - F.lit(origin_us)) / F.lit(chunk_us)).cast("long")
    return F.explode(F.sequence(first, last))


PERIOD_SCHEMA = "period long, true_pairs long, produced_pairs long, stored_rows long, distinct_pairs long"


def join_periods(
    arrivals: DataFrame,
    results: DataFrame,
    query: JoinQuery,
    origin_us: int,
    period_us: int,
    periods: tuple[int | None, int],
) -> DataFrame:
    """Per period (of a pair's later event time): true pairs, those stored, stored rows and distinct pairs.

    ``arrivals``: the job's tuples (seq, side, ts, x, y, key); ``results``: its stored pairs
    (r_seq, s_seq, r_ts, s_ts). A tuple goes to its period and to the later ones its window
    reaches, so each period's exact join (:func:`~outoforder.core.joins.query.exact_join`) sees
    every pair whose later tuple lies in it. ``periods = (first, last)``; first None: every period
    up to ``last``, and the stored pairs of every period (a full check looks for duplicates among
    all of them; a period after ``last`` has no true pairs here).
    """
    first, last = periods

    def period_of(ts: Column) -> Column:
        return F.floor((ts - F.lit(origin_us)) / F.lit(period_us)).cast("long")

    none = F.lit(None).cast("long")
    reach = _chunks(F.col("ts"), 0, query.window_us, origin_us, period_us)
    tuples = arrivals.select(
        reach.alias("period"), F.lit("a").alias("kind"), "seq", "side", "ts", "x", "y", "key",
        none.alias("r_seq"), none.alias("s_seq"),
    )  # fmt: skip
    stored = results.select(
        period_of(F.greatest("r_ts", "s_ts")).alias("period"), F.lit("p").alias("kind"), none.alias("seq"),
        none.alias("side"), none.alias("ts"), F.lit(None).cast("double").alias("x"),
        F.lit(None).cast("double").alias("y"), none.alias("key"), "r_seq", "s_seq",
    )  # fmt: skip
    if first is None:  # every period: the stored pairs of later (open) periods are counted too
        tuples = tuples.where(F.col("period") <= F.lit(last))
    else:
        judged = F.col("period").between(F.lit(first), F.lit(last))
        tuples, stored = tuples.where(judged), stored.where(judged)
    both = tuples.unionByName(stored)

    def judge(table: pa.Table) -> pa.Table:
        return _judge_period(table, query, origin_us, period_us)

    return both.groupBy("period").applyInArrow(judge, PERIOD_SCHEMA)


def _judge_period(table: pa.Table, query: JoinQuery, origin_us: int, period_us: int) -> pa.Table:
    period = int(table.column("period")[0].as_py())
    kind = table.column("kind").to_numpy(zero_copy_only=False)
    a = table.filter(pa.array(kind == "a"))
    p = table.filter(pa.array(kind == "p"))
    col = {c: a.column(c).to_numpy() for c in ("seq", "side", "ts", "x", "y", "key")}
    inp = JoinInput(
        col["side"], col["ts"], col["x"].astype(np.float64), col["y"].astype(np.float64), col["key"]
    )
    pairs = exact_join(inp, query)
    later = (
        np.maximum(col["ts"][pairs[:, 0]], col["ts"][pairs[:, 1]]) if len(pairs) else np.zeros(0, np.int64)
    )
    mine = pairs[(later - origin_us) // period_us == period]
    truth = zip(col["seq"][mine[:, 0]].tolist(), col["seq"][mine[:, 1]].tolist(), strict=True)
    stored = list(zip(p.column("r_seq").to_pylist(), p.column("s_seq").to_pylist(), strict=True))
    distinct = set(stored)
    produced = sum(1 for pair in truth if pair in distinct)
    return pa.table(
        {"period": [period], "true_pairs": [len(mine)], "produced_pairs": [produced],
         "stored_rows": [len(stored)], "distinct_pairs": [len(distinct)]},
        schema=pa.schema([(n, pa.int64()) for n in PERIOD_SCHEMA.replace(" long", "").split(", ")]),
    )  # fmt: skip


WINDOW_SCHEMA = "wid long, exact double, n long, below long, at long"


def exact_windows(
    tuples: DataFrame,
    windows: Windows,
    aggregate: str,
    wids: tuple[int | None, int],
    emitted: Mapping[int, float] | None = None,
) -> DataFrame:
    """Per window holding a tuple, in ``wids = (first, last)`` (first None: from the start): its exact value.

    ``tuples``: (seq, ts, v). Columns: wid, exact, n (members), and for a quantile the members below
    and at or below the value the stream emitted (``emitted``: window -> value), for its rank error.
    """
    chunk_us = windows.slide_us * CHUNK_WINDOWS
    first, last = wids
    # a tuple's windows start in (ts - size, ts]: a window belongs to the chunk of its start
    grouped = tuples.select(
        _chunks(F.col("ts"), -windows.size_us + 1, 0, 0, chunk_us).alias("chunk"), "seq", "ts", "v"
    )
    kind, _ = parse_aggregate(aggregate)
    keys = np.array(sorted(emitted or {}), dtype=np.int64)
    refs = np.array([(emitted or {})[int(w)] for w in keys], dtype=np.float64)

    def judge(table: pa.Table) -> pa.Table:
        chunk = int(table.column("chunk")[0].as_py())
        ts, v = table.column("ts").to_numpy(), table.column("v").to_numpy(zero_copy_only=False)
        idx, wid = windows.explode(ts)
        own = (wid * windows.slide_us) // chunk_us == chunk
        own &= wid <= last if first is None else (wid <= last) & (wid >= first)
        idx, wid = idx[own], wid[own]
        ids, exact = grouped_aggregates(wid, v.astype(np.float64)[idx], aggregate)
        n = np.bincount(np.searchsorted(ids, wid), minlength=ids.size).astype(np.int64)
        below, at = np.zeros(ids.size, np.int64), np.zeros(ids.size, np.int64)
        if kind == "quantile" and keys.size:
            at_key = np.minimum(np.searchsorted(keys, wid), keys.size - 1)
            ref = np.where(keys[at_key] == wid, refs[at_key], np.nan)  # nan: not emitted, no rank
            pos = np.searchsorted(ids, wid)
            member = v.astype(np.float64)[idx]
            below = np.bincount(pos, weights=member < ref, minlength=ids.size).astype(np.int64)
            at = np.bincount(pos, weights=member <= ref, minlength=ids.size).astype(np.int64)
        return pa.table({"wid": ids, "exact": exact, "n": n, "below": below, "at": at})

    return grouped.groupBy("chunk").applyInArrow(judge, WINDOW_SCHEMA)


TOPK_SCHEMA = "window_id long, members long, rank long, seq long"


def exact_topk_windows(
    tuples: DataFrame, windows: Windows, k: int, wids: tuple[int | None, int]
) -> DataFrame:
    """Per window holding a scored tuple, in ``wids``: its members and its exact top-k, one row per rank.

    ``tuples``: (seq, ts, score). Ties go to the smaller seq, as in
    :func:`~outoforder.core.topk.reference.exact_topk`.
    """
    chunk_us = windows.slide_us * CHUNK_WINDOWS
    first, last = wids
    grouped = tuples.select(
        _chunks(F.col("ts"), -windows.size_us + 1, 0, 0, chunk_us).alias("chunk"), "seq", "ts", "score"
    )

    def judge(table: pa.Table) -> pa.Table:
        chunk = int(table.column("chunk")[0].as_py())
        ts, seq = table.column("ts").to_numpy(), table.column("seq").to_numpy()
        score = table.column("score").to_numpy(zero_copy_only=False).astype(np.float64)
        top = exact_topk(ts, score, seq, windows, k)
        _, wid = windows.explode(ts)
        members = dict(zip(*np.unique(wid, return_counts=True), strict=True))
        rows: dict[str, list[int]] = {"window_id": [], "members": [], "rank": [], "seq": []}
        for w, best in top.items():
            if (w * windows.slide_us) // chunk_us != chunk or w > last or (first is not None and w < first):
                continue
            for rank, s in enumerate(best, start=1):
                rows["window_id"].append(w)
                rows["members"].append(int(members[w]))
                rows["rank"].append(rank)
                rows["seq"].append(int(s))
        return pa.table({c: pa.array(vs, pa.int64()) for c, vs in rows.items()})

    return grouped.groupBy("chunk").applyInArrow(judge, TOPK_SCHEMA)
