"""QJoin set-at-a-time on Spark, one micro-batch of arrivals at a time.

Exactly :func:`outoforder.core.joins.qjoin.qjoin_set` (the differential tests hold them together),
computed in Spark tasks:

- per arrival, the stream maxima M_R, M_S, the progress T = min(M_R, M_S) and the horizons
  H_X = running max of (T - w - d_X) are prefix maxima over the batch's arrival order, seeded with
  the state carried from the previous batch (:mod:`outoforder.core.joins.scan`, run by
  :func:`outoforder.spark.scan.carried_scan`: one task, or ranges of arrivals with carries);
- each arrival probes the tuples still buffered from earlier batches plus the earlier arrivals of
  its own batch, through an equi-join on the predicate's buckets (the key, or the cells of side
  2θ its θ-disc meets) and on the two event-time slots of width 2w its ±w range meets, then the
  predicate itself; a candidate is emitted iff it
  is on the other stream, arrived earlier, and ``candidate.ts >= H_side(arrival)``;
- the new buffer keeps the tuples with ``ts >= H`` at the end of the batch.

A micro-batch boundary never changes a result: H is a prefix maximum and the carried state is
exactly what the tuple-at-a-time operator holds after the batch's last arrival.

Input columns: ``seq`` (arrival order), ``side`` (0 = R, 1 = S), ``ts`` (µs), ``x``, ``y``,
``key``, ``d_r`` and ``d_s`` (the retention in force at that arrival, µs).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from outoforder.core.joins.progress import NEG
from outoforder.core.joins.query import JoinQuery
from outoforder.core.joins.scan import (
    KSLACK_LEVEL_KEYS,
    LEVEL_KEYS,
    kslack_fold,
    kslack_progress,
    kslack_summary,
    progress,
    scan_fold,
    scan_summary,
)
from outoforder.spark.rows import arrow_schema, one_row
from outoforder.spark.scan import carried_scan

TUPLE_SCHEMA = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("side", LongType(), False),
        StructField("ts", LongType(), False),
        StructField("x", DoubleType(), False),
        StructField("y", DoubleType(), False),
        StructField("key", LongType(), False),
    ]
)
TUPLE_COLS = [f.name for f in TUPLE_SCHEMA.fields]


@dataclass(frozen=True)
class QJoinState:
    """What QJoin carries from one micro-batch to the next (None = not seen yet)."""

    m_r: int | None
    m_s: int | None
    h_r: int | None
    h_s: int | None
    buffer: DataFrame

    @classmethod
    def empty(cls, spark: SparkSession) -> QJoinState:
        """The state before the first arrival."""
        return cls(None, None, None, None, spark.createDataFrame([], TUPLE_SCHEMA))


def _floor_div(value: str, width: int) -> Column:
    """floor(value / width) of a long column expression, exact in integers."""
    return F.expr(f"(({value}) - pmod({value}, {width})) div {width}")


def _buckets(df: DataFrame, query: JoinQuery, probe: bool) -> DataFrame:
    """Bucket columns (b1, b2, b3): the key or square cells of side 2θ, and slots of event time 2w wide.

    A tuple lies in one bucket; a probe explodes to every bucket its range (±w in time, ±θ in x
    and y) meets, so the equi-join finds each candidate of the predicate in exactly one bucket.
    With buckets twice the range's half-width the range meets two slots, and two cells per axis
    (three when rounding puts a bound on a cell edge): about 2 x 2 x 2 = 8 copies of a probe with
    the distance predicate and 2 with the key, where buckets as wide as the half-width need
    3 x 3 x 3 = 27 (and 3). Copies are what the join shuffles and sorts; the larger buckets only
    add comparisons inside a bucket, which cost less. The time slot keeps the join linear in the
    batch's length: without it every probe meets its cell's whole batch.
    """
    w = query.window_us
    width = max(2 * w, 1)
    if query.predicate == "key":
        df = df.withColumn("b1", F.col("key")).withColumn("b2", F.lit(0).cast("long"))
    else:
        size = 2 * query.theta if query.theta > 0 else 1.0
        # the range's bounds widened by a hair, so that rounding can only add a cell, never lose one
        reach = query.theta * (1 + 1e-9) + 1e-12

        def cell(v: Column) -> Column:
            return F.floor(v / F.lit(size)).cast("long")

        if probe:
            for axis, b in (("x", "b1"), ("y", "b2")):
                near = F.sequence(cell(F.col(axis) - F.lit(reach)), cell(F.col(axis) + F.lit(reach)))
                df = df.withColumn(b, F.explode(near))
        else:
            df = df.withColumn("b1", cell(F.col("x"))).withColumn("b2", cell(F.col("y")))
    if not probe:
        return df.withColumn("b3", _floor_div("ts", width))
    near = F.sequence(_floor_div(f"ts - {w}", width), _floor_div(f"ts + {w}", width))
    return df.withColumn("b3", F.explode(near))


def _same_bucket() -> Column:
    return (
        (F.col("p.b1") == F.col("c.b1")) & (F.col("p.b2") == F.col("c.b2")) & (F.col("p.b3") == F.col("c.b3"))
    )


def _predicate(query: JoinQuery) -> Column:
    band = F.abs(F.col("p.ts") - F.col("c.ts")) <= F.lit(query.window_us)
    if query.predicate == "key":
        return band & (F.col("p.key") == F.col("c.key"))
    dx = F.col("p.x") - F.col("c.x")
    dy = F.col("p.y") - F.col("c.y")
    return band & ((dx * dx + dy * dy) <= F.lit(query.theta * query.theta))


def exact_pairs(df: DataFrame, query: JoinQuery) -> DataFrame:
    """Every pair of ``df``'s tuples that satisfies ``query``, whatever their arrival order: the exact join.

    The Spark twin of :func:`outoforder.core.joins.query.exact_join`: an equi-join of R's probes
    (exploded to the buckets their range meets) with S's tuples on the key or cell and the time slot,
    then the predicate; each pair meets in exactly one bucket, so it is found once. Input columns
    ``seq``, ``side``, ``ts``, ``x``, ``y``, ``key``; output ``r_seq``, ``s_seq``, ``r_ts``, ``s_ts``.
    """
    probes = _buckets(df.where(F.col("side") == 0), query, probe=True).alias("p")
    found = _buckets(df.where(F.col("side") == 1), query, probe=False).alias("c")
    return probes.join(found, _same_bucket() & _predicate(query)).select(
        F.col("p.seq").alias("r_seq"), F.col("c.seq").alias("s_seq"), F.col("p.ts").alias("r_ts"),
        F.col("c.ts").alias("s_ts"),
    )  # fmt: skip


PROGRESS_SCHEMA = (
    "kind string, seq long, side long, ts long, x double, y double, key long, h_r long, h_s long, "
    "m_r long, m_s long"
)
ROWS_PER_TASK = 2_000_000  # arrivals a batch may hold before its scan is split into ranges


class _Progress:
    """QJoin's per-arrival progress as a :class:`~outoforder.spark.scan.ScanKernel`."""

    level_keys = LEVEL_KEYS

    def __init__(self, window_us: int) -> None:
        self.window_us = window_us

    def summarize(self, level: int, cols: dict[str, Any], carry: dict[str, Any]) -> dict[str, Any]:
        return scan_summary(level, cols["side"], cols["ts"], cols["d_r"], cols["d_s"], carry, self.window_us)

    def fold(self, level: int, carry: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
        return scan_fold(level, carry, summary)

    def finish(self, cols: dict[str, Any], carry: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        if not cols:
            return
        p = progress(cols["side"], cols["ts"], cols["d_r"], cols["d_s"], carry, self.window_us)
        n = cols["seq"].size

        def nullable(a: npt.NDArray[np.int64]) -> pa.Array:
            return pa.array(a, pa.int64(), mask=a == NEG)

        names = ["seq", "side", "ts", "x", "y", "key"]
        arrays = [pa.array(["a"] * n, pa.string())]
        arrays += [pa.array(cols[c], pa.float64() if c in ("x", "y") else pa.int64()) for c in names]
        arrays += [nullable(p["h_r"]), nullable(p["h_s"]), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())]
        yield pa.RecordBatch.from_arrays(arrays, names=["kind", *names, "h_r", "h_s", "m_r", "m_s"])
        last = {k: None if p[k][-1] == NEG else int(p[k][-1]) for k in ("m_r", "m_s", "h_r", "h_s")}
        yield pa.RecordBatch.from_pylist(
            [{"kind": "s", "seq": int(cols["seq"][-1]), **last}],
            schema=arrow_schema(PROGRESS_SCHEMA),
        )


def qjoin_batch(
    batch: DataFrame,
    state: QJoinState,
    query: JoinQuery,
    size: tuple[int, int, int] | None = None,
    rows_per_task: int = ROWS_PER_TASK,
) -> tuple[DataFrame, QJoinState]:
    """Process one micro-batch: its result pairs (r_seq, s_seq, emitted_at, r_ts, s_ts) and the new state.

    ``size`` is the batch's (rows, smallest seq, largest seq) when the caller knows it.
    """
    a = batch.select(*TUPLE_COLS, "d_r", "d_s")
    if size is None:
        got = one_row(a.agg(F.count("*"), F.min("seq"), F.max("seq")))
        size = (int(got[0]), int(got[1] or 0), int(got[2] or 0))
    carry = {"m_r": state.m_r, "m_s": state.m_s, "h_r": state.h_r, "h_s": state.h_s}
    scanned = carried_scan(
        a, _Progress(query.window_us), carry, PROGRESS_SCHEMA, rows_per_task, size[0], (size[1], size[2])
    ).localCheckpoint()
    ends = scanned.where(F.col("kind") == "s").collect()
    last = max(ends, key=lambda r: r["seq"]) if ends else None
    arrivals = scanned.where(F.col("kind") == "a")

    candidates = state.buffer.select(*TUPLE_COLS).unionByName(arrivals.select(*TUPLE_COLS))
    probe = _buckets(arrivals.select(*TUPLE_COLS, "h_r", "h_s"), query, probe=True).alias("p")
    # sort-merge, never broadcast: at runtime a side can look small enough to broadcast after its
    # shuffle and still not fit in the driver's memory as a hash table (a 60 s interval did not)
    cand = _buckets(candidates, query, probe=False).hint("merge").alias("c")
    horizon = F.when(F.col("c.side") == 0, F.col("p.h_r")).otherwise(F.col("p.h_s"))
    joined = probe.join(
        cand, _same_bucket() & (F.col("p.side") != F.col("c.side")) & (F.col("c.seq") < F.col("p.seq"))
    ).where(_predicate(query) & (horizon.isNull() | (F.col("c.ts") >= horizon)))
    pairs = joined.select(
        F.when(F.col("p.side") == 0, F.col("p.seq")).otherwise(F.col("c.seq")).alias("r_seq"),
        F.when(F.col("p.side") == 1, F.col("p.seq")).otherwise(F.col("c.seq")).alias("s_seq"),
        F.col("p.seq").alias("emitted_at"),
        F.when(F.col("p.side") == 0, F.col("p.ts")).otherwise(F.col("c.ts")).alias("r_ts"),
        F.when(F.col("p.side") == 1, F.col("p.ts")).otherwise(F.col("c.ts")).alias("s_ts"),
    )

    if last is None:  # an empty batch: nothing moves
        return pairs, QJoinState(state.m_r, state.m_s, state.h_r, state.h_s, candidates)
    h_r, h_s = last["h_r"], last["h_s"]
    keep = F.when(F.col("side") == 0, F.lit(h_r).isNull() | (F.col("ts") >= F.lit(h_r))).otherwise(
        F.lit(h_s).isNull() | (F.col("ts") >= F.lit(h_s))
    )
    return pairs, QJoinState(last["m_r"], last["m_s"], h_r, h_s, candidates.where(keep))


KSLACK_SCHEMA = (
    "kind string, seq long, side long, ts long, x double, y double, key long, f_r long, f_s long, "
    "late boolean, m_r long, m_s long, k_r long, k_s long"
)


class _KSlackProgress:
    """The K-slack join's per-arrival frontiers as a :class:`~outoforder.spark.scan.ScanKernel`."""

    level_keys = KSLACK_LEVEL_KEYS

    def __init__(self, adaptive: bool, scheduled: bool) -> None:
        self.adaptive, self.scheduled = adaptive, scheduled

    def _schedule(self, cols: dict[str, Any]) -> tuple[Any, Any] | None:
        return (cols["k_r"], cols["k_s"]) if self.scheduled else None

    def summarize(self, level: int, cols: dict[str, Any], carry: dict[str, Any]) -> dict[str, Any]:
        return kslack_summary(level, cols["side"], cols["ts"], carry, self.adaptive, self._schedule(cols))

    def fold(self, level: int, carry: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
        return kslack_fold(level, carry, summary)

    def finish(self, cols: dict[str, Any], carry: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        if not cols:
            return
        p = kslack_progress(cols["side"], cols["ts"], carry, self.adaptive, self._schedule(cols))
        n = cols["seq"].size
        schema = arrow_schema(KSLACK_SCHEMA)
        rows = {"kind": np.full(n, "a", dtype=object), **{c: cols[c] for c in TUPLE_COLS}, "late": p["late"]}
        arrays = []
        for f in schema:
            if f.name in ("f_r", "f_s"):
                arrays.append(pa.array(p[f.name], f.type, mask=p[f.name] == NEG))
            else:
                arrays.append(pa.array(rows[f.name], f.type) if f.name in rows else pa.nulls(n, f.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        end = {k: None if p[k][-1] == NEG else int(p[k][-1]) for k in ("m_r", "m_s", "f_r", "f_s")}
        end |= {k: int(p[k].max()) for k in ("k_r", "k_s")}
        yield pa.RecordBatch.from_pylist([{"kind": "s", "seq": int(cols["seq"][-1]), **end}], schema=schema)


@dataclass(frozen=True)
class KSlackState:
    """What the K-slack join carries between micro-batches (None = not seen yet).

    ``pending`` holds accepted tuples not yet released; ``released`` the released tuples the
    join may still need (ts >= min(F_R, F_S) - w).
    """

    m: tuple[int | None, int | None]
    k: tuple[int, int]
    f: tuple[int | None, int | None]
    pending: DataFrame
    released: DataFrame

    @classmethod
    def empty(cls, spark: SparkSession, k_us: tuple[int, int] = (0, 0)) -> KSlackState:
        """The state before the first arrival."""
        empty = spark.createDataFrame([], TUPLE_SCHEMA)
        return cls((None, None), k_us, (None, None), empty, empty.withColumn("rel", F.lit(0).cast("long")))


def kslack_batch(
    batch: DataFrame,
    state: KSlackState,
    query: JoinQuery,
    adaptive_max_delay: bool,
    final: bool = False,
    rows_per_task: int = ROWS_PER_TASK,
) -> tuple[DataFrame, DataFrame, KSlackState]:
    """One micro-batch of the K-slack join (fixed K, or MP-K-slack when ``adaptive_max_delay``).

    When the batch has columns ``k_r`` and ``k_s`` they give K per arrival (AQ-K-slack's adapted
    schedule, :class:`outoforder.core.joins.kslack.ScheduledK`) instead of the state's fixed K.
    Returns (result pairs r_seq, s_seq, emitted_at; late arrivals seq; new state). ``final``
    flushes everything still buffered at the end of the stream (emitted_at = last seq + 1).
    The set form this reproduces is :func:`outoforder.core.joins.kslack.kslack_set`.
    """
    scheduled = {"k_r", "k_s"} <= set(batch.columns)
    a = batch.select(*TUPLE_COLS, *(["k_r", "k_s"] if scheduled else []))
    got = one_row(a.agg(F.count("*"), F.min("seq"), F.max("seq")))
    carry = {"m_r": state.m[0], "m_s": state.m[1], "k_r": state.k[0], "k_s": state.k[1], "f_r": state.f[0],
             "f_s": state.f[1]}  # fmt: skip
    scan = _KSlackProgress(adaptive_max_delay, scheduled)
    a = carried_scan(
        a, scan, carry, KSLACK_SCHEMA, rows_per_task, int(got[0]), (int(got[1] or 0), int(got[2] or 0))
    ).localCheckpoint()
    ends = a.where(F.col("kind") == "s").collect()
    a = a.where(F.col("kind") == "a")
    late = a.where("late").select("seq")

    # release: the first arrival (at or after its own) at which its stream's frontier reaches ts
    steps = a.select("seq", "f_r", "f_s")
    pending = state.pending.unionByName(a.where(~F.col("late")).select(*TUPLE_COLS))
    released_now = (
        pending.alias("t")
        .join(steps.alias("j"), F.col("j.seq") >= F.col("t.seq"))
        .where(F.when(F.col("t.side") == 0, F.col("j.f_r")).otherwise(F.col("j.f_s")) >= F.col("t.ts"))
        .groupBy(*[F.col(f"t.{c}") for c in TUPLE_COLS])
        .agg(F.min("j.seq").alias("rel"))
    )
    last = [None] * 7
    if ends:
        e = max(ends, key=lambda r: r["seq"])
        last = [e["seq"], e["m_r"], e["m_s"], e["k_r"], e["k_s"], e["f_r"], e["f_s"]]
    # materialise before any union: it keeps the plans small and sidesteps an optimizer failure
    # (constraint rewriting across a union over an aggregate of aliased columns)
    pending = pending.localCheckpoint()
    released_now = released_now.select(*TUPLE_COLS, "rel").localCheckpoint()
    if final:
        flush_at = (last[0] if last[0] is not None else -1) + 1
        rest = pending.join(released_now.select("seq"), "seq", "left_anti")
        released_now = released_now.unionByName(
            rest.select(*TUPLE_COLS, F.lit(flush_at).cast("long").alias("rel"))
        ).localCheckpoint()

    # pairs: each newly released tuple with the other stream's released tuples (earlier or now)
    partners = state.released.unionByName(released_now)
    probe = _buckets(released_now, query, probe=True).alias("p")
    cand = _buckets(partners, query, probe=False).hint("merge").alias("c")
    joined = probe.join(cand, _same_bucket() & (F.col("p.side") != F.col("c.side")))
    # each pair once: found from its later-released tuple (R's side when both leave in the flush)
    once = (F.col("c.rel") < F.col("p.rel")) | ((F.col("c.rel") == F.col("p.rel")) & (F.col("p.side") == 0))
    joined = joined.where(_predicate(query) & once)
    pairs = joined.select(
        F.when(F.col("p.side") == 0, F.col("p.seq")).otherwise(F.col("c.seq")).alias("r_seq"),
        F.when(F.col("p.side") == 1, F.col("p.seq")).otherwise(F.col("c.seq")).alias("s_seq"),
        F.greatest(F.col("p.rel"), F.col("c.rel")).alias("emitted_at"),
    )

    f_r = last[5] if last[5] is not None else state.f[0]
    f_s = last[6] if last[6] is not None else state.f[1]
    level = None if f_r is None or f_s is None else min(f_r, f_s) - query.window_us
    released = partners if level is None else partners.where(F.col("ts") >= F.lit(level))
    still_pending = pending.join(released_now.select("seq"), "seq", "left_anti")
    new_state = KSlackState(
        (last[1] if last[1] is not None else state.m[0], last[2] if last[2] is not None else state.m[1]),
        (
            int(last[3]) if last[3] is not None else state.k[0],
            int(last[4]) if last[4] is not None else state.k[1],
        ),
        (f_r, f_s),
        still_pending.localCheckpoint(),
        released.localCheckpoint(),
    )
    return pairs, late, new_state
