"""The buffered window operator (HPM's stream module) set at a time on Spark, one micro-batch at a time.

Exactly :func:`outoforder.core.windows.buffered.buffered_reference` run with ``control_points`` at
the batch ends (the differential tests hold them together). Per batch, with DataFrame operations:

- per arrival (window prefix maxima over the arrival order, seeded with the carried state): the
  largest event time before it and so its delay, the largest delay ``k``, ``t_max``, the buffer
  ``K`` (fixed, ``k`` for MP-K-slack, ``round(α·k)`` for HPM with α fixed during the batch, or a
  given ``slack`` column) and the close frontier ``C`` before and after it;
- each tuple's window memberships (``sequence(first id, last id)``), split into *received* (the
  window was still open: ``end > C`` before the arrival) and *late* (the ledger);
- the windows each arrival closes, ``end`` in ``(C_before, C]``, by exploding only that id range
  (clipped to the ids that hold data), so a window's close costs one row;
- the aggregate of every closed window over its received memberships (carried buffer + batch);
- coverage observations: windows whose ``end + H`` the frontier passes, with their late count.

The driver then computes ``λ_thr`` with the same pure function as the reference (a few hundred
windows per batch) and applies the observations to the policy in the order the reference does.

Input columns: ``seq`` (arrival order), ``ts`` (µs), ``v`` (the value).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from outoforder.core.windows.aggregate import parse_aggregate
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.quality import lambda_threshold, received_cv
from outoforder.spark.rows import one_row

if TYPE_CHECKING:
    from outoforder.core.windows.slack import SlackPolicy

MEMBER_SCHEMA = StructType(
    [
        StructField("wid", LongType(), False),
        StructField("seq", LongType(), False),
        StructField("ts", LongType(), False),
        StructField("v", DoubleType(), False),
    ]
)
WATCH_SCHEMA = StructType(
    [
        StructField("wid", LongType(), False),
        StructField("n_rcv", LongType(), False),
        StructField("n_late", LongType(), False),
        StructField("lambda_thr", DoubleType(), False),
    ]
)


@dataclass(frozen=True)
class WindowState:
    """What the operator carries between micro-batches (None = nothing seen yet).

    ``buffer`` holds the received memberships (wid, seq, ts, v) of windows still open; ``watch``
    the closed windows whose coverage is not observed yet (wid, n_rcv, n_late, lambda_thr).
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

    emitted: pd.DataFrame  # wid, value, n_rcv, emitted_at, slack_at_close, lag_us, lambda_thr
    late: DataFrame  # seq, ts, wid
    slack: DataFrame  # seq, slack
    observations: pd.DataFrame  # wid, obs_at, n_rcv, n_late, lambda_thr


def _lit(value: int | None) -> Column:
    return F.lit(value).cast("long")


def _floor_div(col: Column, d: int) -> Column:
    return F.floor(col / F.lit(d)).cast("long")


def memberships(df: DataFrame, windows: Windows, ts: str = "ts") -> Column:
    """The ids of every window containing ``ts`` (explode it for one row per membership)."""
    return F.sequence(
        _floor_div(F.col(ts) - F.lit(windows.size_us), windows.slide_us) + 1,
        _floor_div(F.col(ts), windows.slide_us),
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
    expr = {
        "sum": F.sum("v"),
        "count": F.count("*").cast("double"),
        "avg": F.avg("v"),
        "min": F.min("v"),
        "max": F.max("v"),
    }[kind]
    return stats.join(members.groupBy("wid").agg(expr.alias("value")), "wid")


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


def _passed(a: DataFrame, offset: int, query: WindowQuery, lo_id: int, hi_id: int, col: str) -> DataFrame:
    """(wid, ``col``): the arrival at which the frontier passes each window's ``end + offset``.

    Per arrival, the windows with ``end + offset`` in (C_before, C], clipped to ids ``[lo_id, hi_id]``.
    """
    w = query.windows
    top = _floor_div(F.col("c") - F.lit(offset + w.size_us), w.slide_us)
    bottom = F.coalesce(
        _floor_div(F.col("c_before") - F.lit(offset + w.size_us), w.slide_us) + 1, _lit(lo_id)
    )
    lo = F.greatest(bottom, _lit(lo_id))
    hi = F.least(top, _lit(hi_id))
    steps = a.where(F.col("c").isNotNull()).select("seq", lo.alias("lo"), hi.alias("hi")).where("lo <= hi")
    return steps.select(F.explode(F.sequence("lo", "hi")).alias("wid"), F.col("seq").alias(col))


def buffered_batch(
    batch: DataFrame,
    state: WindowState,
    query: WindowQuery,
    slack: str | int | float,
    final: bool = False,
) -> tuple[BatchOutput, WindowState]:
    """One micro-batch of the operator.

    ``slack``: an int (fixed K), ``"max-delay"`` (MP-K-slack), a float α (HPM: ``K = round(α·k)``)
    or ``"column"`` (the batch's ``slack`` column gives K per arrival).

    ``final`` flushes the windows still open after the batch (emitted at last seq + 1).
    """
    spark = batch.sparkSession
    w = query.windows
    upto = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)
    a = batch.select("seq", "ts", "v", *(["slack"] if slack == "column" else []))
    if slack == "column":
        a = a.withColumnRenamed("slack", "given_slack")
    a = a.withColumn("tmax_before", F.greatest(_lit(state.t_max), F.max("ts").over(before)))
    a = a.withColumn("tmax", F.greatest(_lit(state.t_max), F.max("ts").over(upto)))
    a = a.withColumn("delay", F.greatest(_lit(0), F.coalesce(F.col("tmax_before") - F.col("ts"), _lit(0))))
    a = a.withColumn("k", F.greatest(_lit(state.k), F.max("delay").over(upto)))
    if slack == "column":
        k_expr = F.col("given_slack").cast("long")
    elif slack == "max-delay":
        k_expr = F.col("k")
    elif isinstance(slack, float):
        # HALF_EVEN on the exact double, as Python's round() (the reference) does
        k_expr = F.bround(F.lit(slack) * F.col("k"), 0).cast("long")
    else:
        k_expr = _lit(int(slack))
    a = a.withColumn("slack", k_expr)
    step = F.col("tmax") - F.col("slack")
    a = a.withColumn("c", F.greatest(_lit(state.frontier), F.max(step).over(upto)))
    a = a.withColumn("c_before", F.greatest(_lit(state.frontier), F.max(step).over(before))).localCheckpoint()

    last = one_row(a.agg(F.max("seq"), F.max("tmax"), F.max("k"), F.max("c"), F.count("*")))
    if last[4] == 0 and not final:
        empty = spark.createDataFrame([], "seq long, ts long, wid long")
        return BatchOutput(_empty_emitted(), empty, a.select("seq", "slack"), _empty_obs()), state
    last_seq = int(last[0]) if last[0] is not None else (state.last_seq if state.last_seq is not None else -1)
    t_max = int(last[1]) if last[1] is not None else state.t_max
    k = int(last[2]) if last[2] is not None else state.k
    frontier = int(last[3]) if last[3] is not None else state.frontier

    members = a.select(
        "seq",
        "ts",
        "v",
        "c_before",
        F.explode(
            F.sequence(
                _floor_div(F.col("ts") - F.lit(w.size_us), w.slide_us) + 1,
                _floor_div(F.col("ts"), w.slide_us),
            )
        ).alias("wid"),
    ).withColumn("end", F.col("wid") * F.lit(w.slide_us) + F.lit(w.size_us))
    is_late = F.col("c_before").isNotNull() & (F.col("end") <= F.col("c_before"))
    members = members.withColumn("late", is_late).localCheckpoint()
    late = members.where("late").select("seq", "ts", "wid")
    received = state.buffer.unionByName(members.where(~F.col("late")).select("wid", "seq", "ts", "v"))

    ids = received.select("wid").unionByName(state.watch.select("wid")).unionByName(late.select("wid"))
    bounds = one_row(ids.agg(F.min("wid"), F.max("wid")))
    lo_id = int(bounds[0]) if bounds[0] is not None else 0
    hi_id = int(bounds[1]) if bounds[1] is not None else -1

    closing = _passed(a, 0, query, lo_id, hi_id, "emitted_at")
    if final:
        # windows never passed by the frontier: flushed at the end
        still = received.select("wid").distinct().join(closing, "wid", "left_anti")
        closing = closing.unionByName(still.select("wid", _lit(last_seq + 1).alias("emitted_at")))
    closing = closing.localCheckpoint()
    closed_members = received.join(closing, "wid")
    agg = aggregate(closed_members.select("wid", "seq", "v"), query.aggregate)
    at = a.select(
        F.col("seq").alias("emitted_at"),
        F.col("slack").alias("slack_at_close"),
        F.col("tmax").alias("tmax_at"),
    )
    emitted_df = agg.join(closing, "wid").join(at, "emitted_at", "left")
    emitted = emitted_df.toPandas().sort_values("wid", kind="stable").reset_index(drop=True)
    last_slack = a.where(F.col("seq") == last_seq).select("slack").first()
    flush_slack = int(last_slack[0]) if last_slack is not None else 0
    emitted["slack_at_close"] = emitted["slack_at_close"].fillna(flush_slack).astype("int64")
    emitted["tmax_at"] = emitted["tmax_at"].fillna(t_max if t_max is not None else 0).astype("int64")
    emitted["lag_us"] = emitted["tmax_at"] - (emitted["wid"] * w.slide_us + w.size_us)
    emitted["lambda_thr"] = _thresholds(query, emitted)
    emitted = emitted[
        ["wid", "value", "n_rcv", "emitted_at", "slack_at_close", "lag_us", "lambda_thr", "s1", "s2"]
    ]

    # coverage: watched windows + the newly emitted ones, plus late memberships before each mark
    newly = spark.createDataFrame(
        [
            (int(wid), int(n), 0, float(lam))
            for wid, n, lam in zip(emitted["wid"], emitted["n_rcv"], emitted["lambda_thr"], strict=True)
        ],
        WATCH_SCHEMA,
    )
    counted = (
        members.where(F.col("late") & (F.col("c_before") < F.col("end") + F.lit(query.coverage_horizon_us)))
        .groupBy("wid")
        .agg(F.count("*").alias("add_late"))
    )
    empty_thr = float(lambda_threshold(query.aggregate, query.eps, query.delta, 0, 0.0)[0])
    watch = (
        # disjoint: a window is watched from an earlier batch or emitted in this one, never both
        state.watch.unionByName(newly)
        .join(counted, "wid", "full_outer")
        .select(
            "wid",
            F.coalesce("n_rcv", _lit(0)).alias("n_rcv"),
            (F.coalesce("n_late", _lit(0)) + F.coalesce("add_late", _lit(0))).alias("n_late"),
            F.coalesce("lambda_thr", F.lit(empty_thr)).alias("lambda_thr"),
        )
    ).localCheckpoint()
    observed = _passed(a, query.coverage_horizon_us, query, lo_id, hi_id, "obs_at")
    obs = (
        watch.join(observed, "wid")
        .toPandas()
        .sort_values(["obs_at", "wid"], kind="stable")
        .reset_index(drop=True)
    )

    new_state = WindowState(
        t_max,
        k,
        frontier,
        last_seq if last_seq >= 0 else None,
        received.join(closing, "wid", "left_anti").localCheckpoint(),
        watch.join(observed, "wid", "left_anti").localCheckpoint(),
    )
    return BatchOutput(
        emitted, late, a.select("seq", "slack"), obs[["wid", "obs_at", "n_rcv", "n_late", "lambda_thr"]]
    ), new_state


def _thresholds(query: WindowQuery, emitted: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.float64]]:
    n = emitted["n_rcv"].to_numpy(dtype=np.float64)
    cv = received_cv(n, emitted["s1"].to_numpy(dtype=np.float64), emitted["s2"].to_numpy(dtype=np.float64))
    return lambda_threshold(query.aggregate, query.eps, query.delta, n.astype(np.int64), cv)


def _empty_emitted() -> pd.DataFrame:
    cols = {
        "wid": "int64",
        "value": "float64",
        "n_rcv": "int64",
        "emitted_at": "int64",
        "slack_at_close": "int64",
    }
    cols |= {"lag_us": "int64", "lambda_thr": "float64", "s1": "float64", "s2": "float64"}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


def _empty_obs() -> pd.DataFrame:
    cols = {"wid": "int64", "obs_at": "int64", "n_rcv": "int64", "n_late": "int64", "lambda_thr": "float64"}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


def apply_observations(policy: SlackPolicy, observations: pd.DataFrame) -> list[tuple[float, dict[str, Any]]]:
    """Feed a batch's coverage observations to the policy, in the reference's order.

    Returns (coverage, the policy's snapshot after it) per observation: the controller's trace.
    """
    n_rcv = observations["n_rcv"].to_numpy(dtype=np.int64)
    n_late = observations["n_late"].to_numpy(dtype=np.int64)
    lam = observations["lambda_thr"].to_numpy(dtype=np.float64)
    trace = []
    for r, late, thr in zip(n_rcv.tolist(), n_late.tolist(), lam.tolist(), strict=True):
        coverage = r / max(r + late, 1)
        policy.observe_window(coverage, thr)
        trace.append((coverage, policy.snapshot()))
    return trace
