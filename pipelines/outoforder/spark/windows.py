"""The buffered window operator (HPM's stream module) set at a time on Spark, one micro-batch at a time.

Exactly :func:`outoforder.core.windows.hpm.buffered_reference` run with ``control_points`` at
the batch ends (the differential tests hold them together), in the two steps of
:mod:`outoforder.core.windows.batch`, each in Spark tasks:

1. over the batch's arrivals in arrival order (:func:`outoforder.spark.scan.carried_scan`: one
   task, or ranges of arrival sequence numbers with carried state): each arrival's ``t_max``,
   ``k``, buffer ``K`` and close frontier, and the windows that close or are observed at it;
2. by window (a shuffle on window-id ranges: an arrival goes to the one or two ranges its windows
   fall in): emissions with their aggregate and ``λ_thr``, late memberships, coverage
   observations, and the received values and watched windows carried to the next batch.

The driver collects the emitted windows and the observations (a few hundred per batch) and a
summary per task; it applies the observations to the policy in the order the reference does.

Input columns: ``seq`` (arrival order), ``ts`` (µs), ``v`` (the value), and ``slack`` when K is given
per arrival.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, LongType, StructField, StructType

from outoforder.core.joins.progress import NEG
from outoforder.core.windows.aggregate import parse_aggregate
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.batch import (
    LEVEL_KEYS,
    arrival_events,
    foreseen_needs,
    scan_fold,
    scan_summary,
    window_step,
)
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.lateness import Profiles, bucket_of
from outoforder.errors import ConfigError
from outoforder.spark.rows import one_row
from outoforder.spark.scan import carried_scan

ROWS_PER_TASK = 2_000_000  # arrivals a batch may hold before its scan is split into ranges

if TYPE_CHECKING:
    from outoforder.core.windows.slack import SlackPolicy

MEMBER_SCHEMA = StructType(
    [
        StructField("wid", LongType(), False),
        StructField("seq", LongType(), False),
        StructField("ts", LongType(), False),
        StructField("v", DoubleType(), False),
        StructField("bucket", LongType(), True),  # the membership's lateness bucket (core/windows/lateness)
    ]
)
# a watched window's lateness profile, sparse: its non-empty buckets and their count, Σv, min, max
PROFILE_COLUMNS = ("p_bucket", "p_n", "p_s1", "p_lo", "p_hi")
WATCH_SCHEMA = StructType(
    [
        StructField("wid", LongType(), False),
        StructField("n_rcv", LongType(), False),
        StructField("n_late", LongType(), False),
        StructField("lambda_thr", DoubleType(), False),
        *(
            StructField(c, ArrayType(LongType() if c in ("p_bucket", "p_n") else DoubleType()), True)
            for c in PROFILE_COLUMNS
        ),
    ]
)


@dataclass(frozen=True)
class WindowState:
    """What the operator carries between micro-batches (None = nothing seen yet).

    ``buffer`` holds the received memberships (wid, seq, ts, v, bucket) of windows still open;
    ``watch`` the closed windows whose coverage is not observed yet (wid, n_rcv, n_late,
    lambda_thr and their lateness profiles: :data:`PROFILE_COLUMNS`).
    """

    t_max: int | None
    k: int
    frontier: int | None
    last_seq: int | None
    buffer: DataFrame
    watch: DataFrame

    @classmethod
    def empty(cls, spark: SparkSession) -> WindowState:
        """The state before the first arrival."""
        return cls(
            None,
            0,
            None,
            None,
            spark.createDataFrame([], MEMBER_SCHEMA),
            spark.createDataFrame([], WATCH_SCHEMA),
        )


@dataclass(frozen=True)
class BatchOutput:
    """One batch's results.

    Emitted windows and coverage observations (in the order the policy sees them) are small and
    come as pandas; late memberships and K per arrival stay DataFrames.
    """

    emitted: pd.DataFrame  # wid, value, n_rcv, emitted_at, slack_at_close, lag_us, lambda_thr, s1, s2
    late: DataFrame  # seq, ts, wid
    slack: DataFrame  # seq, slack
    observations: pd.DataFrame  # wid, obs_at, n_rcv, n_late, lambda_thr, needed_us
    unsettled: pd.DataFrame  # wid, needed_us: the windows still watched, what they need so far
    arrivals: int = 0
    slack_sum: float = 0.0  # Σ K over the batch's arrivals (its mean K is slack_sum / arrivals)
    late_count: int = 0  # rows of ``late``
    buffered: int = 0  # values carried to the next batch (rows of the new state's buffer)
    watched: int = 0  # windows carried to the next batch (rows of the new state's watch)


def _floor_div(col: Column, d: int) -> Column:
    return F.floor(col / F.lit(d)).cast("long")


def memberships(df: DataFrame, windows: Windows, ts: str = "ts") -> Column:
    """The ids of every window containing ``ts`` (explode it for one row per membership)."""
    return F.sequence(
        _floor_div(F.col(ts) - F.lit(windows.size_us), windows.slide_us) + 1,
        _floor_div(F.col(ts), windows.slide_us),
    )


def pane_start(ts: Column, windows: Windows) -> Column:
    """The start of the pane holding ``ts``: panes are the ``gcd(size, slide)`` slices windows are made of.

    A pane lies inside exactly the windows that hold its start, so per-pane partial results (counts,
    top-k) reach every window of their rows by :func:`memberships` of the start alone.
    """
    pane_us = math.gcd(windows.size_us, windows.slide_us)
    return _floor_div(ts, pane_us) * F.lit(pane_us)


def pane_counts(df: DataFrame, windows: Windows, ts: str = "ts") -> DataFrame:
    """``(window_id, members)``: the rows of every window holding one, counted per pane then summed.

    Each row is counted once, not copied to each of the ``size / slide`` windows it belongs to.
    """
    per_pane = df.groupBy(pane_start(F.col(ts), windows).alias("start")).agg(F.count("*").alias("n"))
    return (
        per_pane.select("n", F.explode(memberships(per_pane, windows, "start")).alias("window_id"))
        .groupBy("window_id")
        .agg(F.sum("n").alias("members"))
    )


def aggregate(members: DataFrame, name: str) -> DataFrame:
    """(wid, value, n_rcv, s1, s2) over memberships (wid, v); quantiles by inverted CDF."""
    kind, q = parse_aggregate(name)
    stats = members.groupBy("wid").agg(
        F.count("*").alias("n_rcv"), F.sum("v").alias("s1"), F.sum(F.col("v") * F.col("v")).alias("s2")
    )
    if kind == "quantile":
        ranked = members.withColumn("rn", F.row_number().over(Window.partitionBy("wid").orderBy("v", "seq")))
        pick = ranked.join(stats.select("wid", "n_rcv"), "wid").where(
            F.col("rn") == F.greatest(F.ceil(F.lit(q) * F.col("n_rcv")), F.lit(1))
        )
        return stats.join(pick.select("wid", F.col("v").alias("value")), "wid")
    expr = value_aggregate(kind)
    if expr is None:
        msg = f"no Spark aggregate for {name!r}"
        raise ConfigError(msg)
    return stats.join(members.groupBy("wid").agg(expr.alias("value")), "wid")


def value_aggregate(kind: str, counted: str = "*") -> Column | None:
    """Spark's aggregate of the values ``v``: sum, count (of ``counted``, a double), avg, min, max.

    None for a quantile, which needs the values ranked.
    """
    return {
        "sum": F.sum("v"),
        "count": F.count(counted).cast("double"),
        "avg": F.avg("v"),
        "min": F.min("v"),
        "max": F.max("v"),
    }.get(kind)


def window_members(tuples: DataFrame, windows: Windows) -> DataFrame:
    """(seq, v, wid): one row per window membership of tuples (seq, ts, v)."""
    return tuples.select("seq", "v", F.explode(memberships(tuples, windows)).alias("wid"))


def exact_windows(tuples: DataFrame, windows: Windows, name: str, ids: DataFrame | None = None) -> DataFrame:
    """(wid, value, n_rcv, s1, s2): the exact aggregate ``name`` of every window over ``tuples``.

    Restricted to the window ids in ``ids`` (column ``wid``) when given.
    """
    members = window_members(tuples, windows)
    if ids is not None:
        members = members.join(F.broadcast(ids.select("wid").distinct()), "wid")
    return aggregate(members, name)


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


def _dense_profiles(t: pa.Table) -> Profiles:
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


class _ArrivalStep:
    """Step 1 as a :class:`~outoforder.spark.scan.ScanKernel`."""

    level_keys = LEVEL_KEYS

    def __init__(self, windows: Windows, horizon_us: int, rule: str | int | float) -> None:
        self.windows, self.horizon_us, self.rule = windows, horizon_us, rule

    def summarize(self, level: int, cols: dict[str, Any], carry: dict[str, Any]) -> dict[str, Any]:
        return scan_summary(level, cols["ts"], carry, self.rule, cols.get("slack"))

    def fold(self, level: int, carry: dict[str, Any], summary: dict[str, Any]) -> dict[str, Any]:
        return scan_fold(level, carry, summary)

    def finish(self, cols: dict[str, Any], carry: dict[str, Any]) -> Iterator[pa.RecordBatch]:
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


def _window_step(
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
        watch_profiles=_dense_profiles(t.filter(pa.array(watched))),
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


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _rule(slack: str | int | float) -> str | int | float:
    if isinstance(slack, bool) or not isinstance(slack, str | int | float):
        msg = f"slack must be an int, a float α, 'max-delay' or 'column', got {slack!r}"
        raise ConfigError(msg)
    return slack


def buffered_batch(
    batch: DataFrame,
    state: WindowState,
    query: WindowQuery,
    slack: str | int | float,
    final: bool = False,
    rows_per_task: int = ROWS_PER_TASK,
) -> tuple[BatchOutput, WindowState]:
    """One micro-batch of the operator.

    ``slack``: an int (fixed K), ``"max-delay"`` (MP-K-slack), a float α (HPM: ``K = round(α·k)``)
    or ``"column"`` (the batch's ``slack`` column gives K per arrival). ``final`` flushes the
    windows still open after the batch (emitted at last seq + 1). Batches of more than
    ``rows_per_task`` arrivals are split into ranges (:func:`outoforder.spark.scan.carried_scan`).
    """
    rule = _rule(slack)
    cols = ["seq", "ts", "v", *(["slack"] if rule == "column" else [])]
    a = batch.select(*cols)
    size = one_row(a.agg(F.count("*"), F.min("seq"), F.max("seq")))
    n = int(size[0])
    carry = {"t_max": state.t_max, "k": state.k, "c": state.frontier}
    step1 = carried_scan(
        a,
        _ArrivalStep(query.windows, query.coverage_horizon_us, rule),
        carry,
        _spark_schema(STEP_SCHEMA),
        rows_per_task,
        n,
        (int(size[1] or 0), int(size[2] or 0)) if n else (0, 0),
    ).localCheckpoint()
    summaries = step1.where(F.col("kind") == "s").collect()
    last = max(summaries, key=lambda r: r["seq"]) if summaries else None
    t_max = state.t_max if last is None else int(last["t_max"])
    k = state.k if last is None else int(last["k"])
    frontier = state.frontier if last is None else int(last["frontier"])
    last_seq = state.last_seq if last is None else int(last["seq"])
    flush = None
    if final:
        at = (last_seq if last_seq is not None else -1) + 1
        flush = (at, int(last["slack"]) if last is not None else 0, t_max if t_max is not None else 0)
    r = RANGE_WINDOWS
    carried = state.buffer.select(
        F.lit("b").alias("kind"),
        F.floor(F.col("wid") / F.lit(r)).cast("long").alias("key"),
        "wid",
        "seq",
        "ts",
        "v",
        "bucket",
    )
    watched = state.watch.select(
        F.lit("w").alias("kind"),
        F.floor(F.col("wid") / F.lit(r)).cast("long").alias("key"),
        "wid",
        "n_rcv",
        "n_late",
        "lambda_thr",
        *PROFILE_COLUMNS,
    )
    step_cols = [*STEP_SCHEMA.names, "bucket", *PROFILE_COLUMNS]
    inputs = (
        step1.where(F.col("kind") != "s")
        .unionByName(carried, allowMissingColumns=True)
        .unionByName(watched, allowMissingColumns=True)
    )
    step2 = (
        inputs.select(*step_cols)
        .repartition("key")
        .mapInArrow(lambda it: _window_step(it, query, flush), _spark_schema(WINDOW_SCHEMA))
        .localCheckpoint()
    )
    small = step2.where(F.col("kind").isin("e", "o", "u", "n")).drop(*PROFILE_COLUMNS).toPandas()
    counts = small[small["kind"] == "n"]
    emitted = small[small["kind"] == "e"].rename(
        columns={"v": "value", "at": "emitted_at", "slack": "slack_at_close"}
    )
    emitted = emitted[
        ["wid", "value", "n_rcv", "emitted_at", "slack_at_close", "lag_us", "lambda_thr", "s1", "s2"]
    ]
    emitted = emitted.sort_values("wid", kind="stable").reset_index(drop=True)
    emitted = emitted.astype(
        {
            "wid": "int64",
            "n_rcv": "int64",
            "emitted_at": "int64",
            "slack_at_close": "int64",
            "lag_us": "int64",
        }
    )
    obs = small[small["kind"] == "o"].rename(columns={"at": "obs_at"})[
        ["wid", "obs_at", "n_rcv", "n_late", "lambda_thr", "needed_us"]
    ]
    obs = obs.astype(
        {"wid": "int64", "obs_at": "int64", "n_rcv": "int64", "n_late": "int64", "needed_us": "int64"}
    )
    obs = obs.sort_values(["obs_at", "wid"], kind="stable").reset_index(drop=True)
    unsettled = small[small["kind"] == "u"][["wid", "needed_us"]]
    unsettled = unsettled.astype({"wid": "int64", "needed_us": "int64"})
    unsettled = unsettled.sort_values("wid", kind="stable").reset_index(drop=True)
    new_state = WindowState(
        t_max,
        k,
        frontier,
        last_seq,
        step2.where(F.col("kind") == "b").select("wid", "seq", "ts", "v", "bucket"),
        step2.where(F.col("kind") == "w").select("wid", "n_rcv", "n_late", "lambda_thr", *PROFILE_COLUMNS),
    )
    output = BatchOutput(
        emitted,
        step2.where(F.col("kind") == "l").select("seq", "ts", "wid"),
        step1.where(
            (F.col("kind") == "a") & (F.col("key") == _floor_div(_first_window(query.windows), r))
        ).select("seq", "slack"),
        obs,
        unsettled,
        arrivals=sum(int(s["n_rcv"]) for s in summaries),
        slack_sum=sum(float(s["slack_sum"]) for s in summaries),
        late_count=int(counts["n_late"].sum()),
        buffered=int(counts["n_rcv"].sum()),
        watched=int(counts["at"].sum()),
    )
    return output, new_state


def _gap_maxima(batches: Iterator[pa.RecordBatch], cuts: npt.NDArray[np.int64]) -> Iterator[pa.RecordBatch]:
    """The largest ts of the rows between consecutive ``cuts`` (g: how many cuts lie at or below seq)."""
    for b in batches:
        if not b.num_rows:
            continue
        seq, ts = (b.column(c).to_numpy(zero_copy_only=False).astype(np.int64) for c in ("seq", "ts"))
        g, inv = np.unique(np.searchsorted(cuts, seq, side="right"), return_inverse=True)
        top = np.full(g.size, NEG, dtype=np.int64)
        np.maximum.at(top, inv, ts)
        yield pa.RecordBatch.from_arrays([pa.array(g), pa.array(top)], names=["g", "top"])


def foreseen(batch: DataFrame, state: WindowState, query: WindowQuery) -> list[int] | None:
    """What the windows watched before a micro-batch need with its late members counted (None: none closed).

    :func:`~outoforder.core.windows.batch.foreseen_needs` on the batch's arrivals with a
    membership in a window closed before it (collected: the late few) and the watched windows
    (carried state, small). Each such arrival's ``t_max`` before it takes one pass over the
    batch: the largest event time between consecutive late arrivals, folded on the driver.
    """
    if state.frontier is None:
        return None
    w = query.windows
    first_end = _first_window(w) * F.lit(w.slide_us) + F.lit(w.size_us)
    late = batch.where(first_end <= F.lit(state.frontier)).select("seq", "ts", "v").toPandas()
    late = late.sort_values("seq", kind="stable")
    cuts = late["seq"].to_numpy(np.int64)
    t_before = np.zeros(0, dtype=np.int64)
    if cuts.size:
        schema = StructType([StructField("g", LongType(), False), StructField("top", LongType(), False)])
        gaps = (
            batch.select("seq", "ts")
            .mapInArrow(lambda it: _gap_maxima(it, cuts), schema)
            .groupBy("g")
            .agg(F.max("top").alias("top"))
            .toPandas()
        )
        top = np.full(cuts.size + 1, NEG, dtype=np.int64)
        top[gaps["g"].to_numpy(np.int64)] = gaps["top"].to_numpy(np.int64)
        carried = NEG if state.t_max is None else int(state.t_max)
        t_before = np.maximum.accumulate(np.maximum(top[:-1], carried))
    watch = state.watch.toArrow()
    needs = foreseen_needs(
        aggregate=query.aggregate,
        eps=query.eps,
        delta=query.delta,
        windows=w,
        horizon_us=query.coverage_horizon_us,
        frontier=state.frontier,
        ts=late["ts"].to_numpy(np.int64),
        v=late["v"].to_numpy(np.float64),
        t_before=t_before,
        watch={
            "wid": watch.column("wid").to_numpy(zero_copy_only=False).astype(np.int64),
            "lambda_thr": watch.column("lambda_thr").to_numpy(zero_copy_only=False).astype(np.float64),
        },
        watch_profiles=_dense_profiles(watch),
    )
    return [int(n) for n in needs["needed_us"]]


def _first_window(windows: Windows) -> Column:
    return _floor_div(F.col("ts") - F.lit(windows.size_us), windows.slide_us) + 1


def apply_observations(policy: SlackPolicy, out: BatchOutput) -> list[tuple[float, dict[str, Any]]]:
    """Feed a batch's coverage observations, then its unsettled windows' needs, to the policy.

    In the reference's order. Returns (coverage, the policy's snapshot after it) per observation:
    the controller's trace.
    """
    obs = out.observations
    n_rcv = obs["n_rcv"].to_numpy(dtype=np.int64)
    n_late = obs["n_late"].to_numpy(dtype=np.int64)
    lam = obs["lambda_thr"].to_numpy(dtype=np.float64)
    needed = obs["needed_us"].to_numpy(dtype=np.int64)
    trace = []
    for r, late, thr, need in zip(
        n_rcv.tolist(), n_late.tolist(), lam.tolist(), needed.tolist(), strict=True
    ):
        coverage = r / max(r + late, 1)
        policy.observe_window(coverage, thr, need)
        trace.append((coverage, policy.snapshot()))
    policy.observe_unsettled(out.unsettled["needed_us"].tolist())
    return trace
