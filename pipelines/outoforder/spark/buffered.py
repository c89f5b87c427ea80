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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DoubleType, LongType, StructField, StructType

from outoforder.core.joins.progress import NEG
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.batch import (
    foreseen_needs,
)
from outoforder.core.windows.buffered import WindowQuery
from outoforder.errors import ConfigError
from outoforder.spark.buffered_steps import (
    PROFILE_COLUMNS,
    RANGE_WINDOWS,
    STEP_SCHEMA,
    WINDOW_SCHEMA,
    ArrivalStep,
    dense_profiles,
    gap_maxima,
    window_task,
)
from outoforder.spark.rows import one_row
from outoforder.spark.scan import carried_scan
from outoforder.spark.windows import floor_div

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
        ArrivalStep(query.windows, query.coverage_horizon_us, rule),
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
        .mapInArrow(lambda it: window_task(it, query, flush), _spark_schema(WINDOW_SCHEMA))
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
            (F.col("kind") == "a") & (F.col("key") == floor_div(_first_window(query.windows), r))
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
            .mapInArrow(lambda it: gap_maxima(it, cuts), schema)
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
        watch_profiles=dense_profiles(watch),
    )
    return [int(n) for n in needs["needed_us"]]


def _first_window(windows: Windows) -> Column:
    return floor_div(F.col("ts") - F.lit(windows.size_us), windows.slide_us) + 1


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
