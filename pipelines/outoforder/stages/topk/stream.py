"""Continuous top-k as a pipeline stage: one arrival-time interval per run, the operator's state in Delta.

``topk-stream`` (:class:`TopKStream`, on the skeleton of :mod:`outoforder.stages.interval`) runs the
pure operator :class:`~outoforder.core.topk.operator.TopK` over the bronze arrivals of
``[start, end)`` (by ``arrival_ts``):

1. the operator and its cache controller are restored from the JSON snapshot *as of* ``start``
   in ``silver/topk_state``;
2. the interval's arrivals go through the operator (:class:`~outoforder.core.topk.operator.TopK`)
   in arrival order, in one Spark task (:func:`outoforder.spark.topk.operator_step`). The operator
   is a state machine over one arrival order, so it is sequential by nature; its state is small
   (k entries per open window), and it is all the driver receives: the arrivals, the results and
   the late tuples go from the task to the tables;
3. emitted windows go to ``gold/topk_windows`` (one row each, also when emitted empty) and their
   lists to ``gold/topk_results``; tuples that arrive after their window's emission go to
   ``silver/topk_late``; every controller decision (the K_min trace, with the lateness
   controller's statement: the K the target needs and the accuracy the bound allows) goes to
   ``silver/topk_cache``; every window settled (its late tuples awaited) goes to
   ``silver/topk_settled`` with its hit rate and the lateness of its true top-k, from which the
   checks tell a target missed by the controller from one the bound put out of reach.
   All are appended once per interval (a rerun writes nothing, see :mod:`outoforder.stages.interval`);
4. the new snapshot is written last.

A tuple with a null or NaN score is not ranked; it is counted per interval. The checks are
:mod:`outoforder.stages.topk.validate`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.errors import StateError
from outoforder.io.tables import (
    BRONZE,
    TOPK_CACHE,
    TOPK_LATE,
    TOPK_RESULTS,
    TOPK_SETTLED,
    TOPK_STATE,
    TOPK_WINDOWS,
)
from outoforder.stages.context import StageContext
from outoforder.stages.interval import Interval, IntervalStage, IntervalSummary, Step
from outoforder.stages.topk.spec import TopKJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True, kw_only=True)
class TopKIntervalSummary(IntervalSummary):
    """What one run of the top-k stream did."""

    stage: ClassVar[str] = "topk-stream"
    unscored: int
    windows: int
    late: int
    decisions: int
    k_min_us: float
    candidates: int
    settled: int = 0
    needed_us: float | None = None  # the newest decision's statement (lateness controller)
    reachable: float | None = None
    bound_us: float | None = None

    def figures(self) -> str:
        """Windows emitted, late memberships, cache decisions, K_min, the candidate list, feasibility."""
        text = (
            f"{self.unscored:,} without a score, {self.windows:,} windows emitted, {self.late:,} late "
            f"memberships, {self.decisions} cache decisions, K_min {self.k_min_us / 1e6:g} s, "
            f"|C| {self.candidates}, {self.settled:,} windows settled"
        )
        if self.needed_us is None or self.reachable is None:
            return text
        if self.bound_us is not None and self.needed_us > self.bound_us:
            return (
                f"{text}; the target is out of reach under the bound of {self.bound_us / 1e6:g} s: it "
                f"allows accuracy {self.reachable:.3f}, the target needs K >= {self.needed_us / 1e6:g} s"
            )
        return f"{text}; the target needs K {self.needed_us / 1e6:g} s"


def topk_tuples(bronze: DataFrame, job: TopKJob) -> DataFrame:
    """Bronze rows of the job's streams as operator input: seq, ts, score (null for NaN)."""
    from pyspark.sql import functions as F

    if job.streams:
        bronze = bronze.where(F.col("stream").isin(*job.streams))
    score = F.col(job.score)
    return bronze.select(
        F.col("arrival_seq").alias("seq"),
        F.col("event_ts").alias("ts"),
        F.when(F.isnan(score), None).otherwise(score).alias("score"),
    )


class TopKStream(IntervalStage[TopKJob, TopKIntervalSummary]):
    """The continuous top-k over arrival-time intervals."""

    name = "topk-stream"
    job_type = TopKJob
    what = "top-k"
    state_table = TOPK_STATE
    tables = (TOPK_WINDOWS, TOPK_RESULTS, TOPK_LATE, TOPK_CACHE, TOPK_SETTLED)  # the checks read them all
    summary_type = TopKIntervalSummary

    def tuples(self, bronze: DataFrame) -> DataFrame:
        """See :func:`topk_tuples`."""
        return topk_tuples(bronze, self.job)

    def step(self, interval: Interval, prev: Mapping[str, Any] | None) -> Step:
        """The interval's arrivals through the operator in a Spark task; append what it emitted."""
        from pyspark.sql import functions as F

        from outoforder.io import delta
        from outoforder.spark.rows import one_row
        from outoforder.spark.topk import operator_step

        source, jid, lake, start = self.source, self.jid, self.settings.lake_root, interval.start_us
        op = self.job.operator()
        snapshot = None
        if prev is not None:  # checked here (it is small) so that a bad one fails with its name
            snapshot = str(prev["snapshot"])
            try:
                op.restore(json.loads(snapshot))
            except (ValueError, StateError) as err:
                msg = f"the top-k snapshot of {source} ({jid}) as of {prev['as_of_us']} is unreadable"
                raise StateError(msg) from err
        out = operator_step(
            self.arrivals(start, interval.end_us), op.query, op.cache, snapshot
        ).localCheckpoint()
        (row,) = out.where(F.col("kind") == "s").select("text").collect()  # the new state: one small row
        try:
            state = json.loads(row["text"])
        except ValueError as err:  # the task writes it; unreadable means a broken task, not bad input
            msg = f"the top-k step of {source} ({jid}) returned an unreadable state"
            raise StateError(msg) from err
        figures = state["figures"]
        counts = {kind: int(n) for kind, n in figures["rows"].items()}  # counted by the task itself
        lit = {"source": F.lit(source), "job": F.lit(jid)}
        started = F.lit(start).cast("long").alias("interval_start_us")
        if counts.get("w"):
            wdf = out.where(F.col("kind") == "w").select(
                *(v.alias(k) for k, v in lit.items()), "window_id", F.col("a").alias("window_end_us"),
                F.col("b").alias("size"), F.col("seq").alias("emitted_at_seq"), F.col("x").alias("cache_us"),
                started, F.lit(interval.now_us).cast("long").alias("written_at_us"),
            )  # fmt: skip
            self.append(wdf, TOPK_WINDOWS, interval)
        if counts.get("r"):
            # a list may hold tuples of earlier intervals: look their ts and score up in bronze, reading
            # only the seq range the lists span (Delta skips the other files by their statistics)
            results = out.where(F.col("kind") == "r").select("window_id", F.col("a").alias("rank"), "seq")
            span = one_row(results.agg(F.min("seq"), F.max("seq")))
            known = self.tuples(
                delta.read_arrivals(
                    self.spark, BRONZE, lake, source=source, seq_range=(int(span[0]), int(span[1]) + 1)
                )
            )
            rdf = results.join(known, "seq").select(
                *(v.alias(k) for k, v in lit.items()), "window_id", "rank", "seq", "ts", "score"
            )
            self.append(rdf, TOPK_RESULTS, interval)
        if counts.get("l"):  # late tuples are this interval's own arrivals: their ts and score are at hand
            ldf = out.where(F.col("kind") == "l").select(
                *(v.alias(k) for k, v in lit.items()), "seq", "window_id", F.col("a").alias("ts"),
                F.col("x").alias("score"), started,
            )  # fmt: skip
            self.append(ldf, TOPK_LATE, interval)
        if counts.get("c"):
            decision = F.from_json(
                "text", "move string, accuracy array<double>, needed_us double, reachable double"
            )
            cdf = out.where(F.col("kind") == "c").select(
                *(v.alias(k) for k, v in lit.items()), F.col("seq").alias("at_seq"),
                F.col("a").alias("progress_us"), F.col("x").alias("k_min_us"), F.col("y").alias("k_down_us"),
                F.col("z").alias("k_up_us"), decision["move"].alias("move"),
                decision["accuracy"].alias("accuracy"), started, decision["needed_us"].alias("needed_us"),
                decision["reachable"].alias("reachable"),
            )  # fmt: skip
            self.append(cdf, TOPK_CACHE, interval)
        if counts.get("q"):
            settled = F.from_json("text", "cache_us double, lateness array<double>")
            qdf = out.where(F.col("kind") == "q").select(
                *(v.alias(k) for k, v in lit.items()), "window_id", F.col("a").alias("window_end_us"),
                F.col("x").alias("hit"), settled["cache_us"].alias("cache_us"), F.col("y").alias("exact_us"),
                F.col("z").alias("awaited_us"), settled["lateness"].alias("lateness"), started,
            )  # fmt: skip
            self.append(qdf, TOPK_SETTLED, interval)
        arrivals = int(figures["arrivals"])
        return Step(
            arrivals=arrivals,
            state={"snapshot": json.dumps(state["snapshot"]), "k_min_us": float(state["k_min_us"])},
            state_rows=int(state["state_rows"]),  # every entry of the operator's state
            added={"arrivals": arrivals},
            figures={
                "unscored": int(figures["unscored"]),
                "windows": counts.get("w", 0),
                "late": counts.get("l", 0),
                "decisions": counts.get("c", 0),
                "k_min_us": float(state["k_min_us"]),
                "candidates": int(state["candidates"]),
                "settled": counts.get("q", 0),
                "needed_us": state.get("needed_us"),
                "reachable": state.get("reachable"),
                "bound_us": self.job.latency_bound_us,
            },
        )


def run_interval(ctx: StageContext, start_us: int, end_us: int) -> TopKIntervalSummary:
    """One interval of the top-k stream (see :class:`TopKStream`)."""
    return TopKStream(ctx).run_interval(start_us, end_us)
