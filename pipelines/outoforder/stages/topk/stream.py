"""Continuous top-k as a pipeline stage: one arrival-time interval per run, the operator's state in Delta.

``topk-stream`` (:class:`TopKStream`, on the skeleton of :mod:`outoforder.stages.interval`) runs the
pure operator :class:`~outoforder.core.topk.operator.TopK` over the bronze arrivals of
``[start, end)`` (by ``arrival_ts``):

1. the operator and its cache controller are restored from the JSON snapshot *as of* ``start``
   in ``silver/topk_state``;
2. the interval's arrivals go through the operator (:class:`~outoforder.core.topk.operator.TopK`)
   in arrival order on the driver. The operator is a state machine over one arrival order, so it
   is sequential by nature; its state is small (k entries per open window). Spark reads and
   writes, and computes the exact top-k for the checks;
3. emitted windows go to ``gold/topk_windows`` (one row each, also when emitted empty) and their
   lists to ``gold/topk_results``; tuples that arrive after their window's emission go to
   ``silver/topk_late``; every controller decision (the K_min trace) goes to ``silver/topk_cache``.
   All are appended once per interval (a rerun writes nothing, see :mod:`outoforder.stages.interval`);
4. the new snapshot is written last.

A tuple with a null or NaN score is not ranked; it is counted per interval. The checks are
:mod:`outoforder.stages.topk.validate`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.config import Settings
from outoforder.core.protocol import Arrival
from outoforder.core.topk.operator import TopK
from outoforder.errors import StateError
from outoforder.io.tables import BRONZE, TOPK_CACHE, TOPK_LATE, TOPK_RESULTS, TOPK_STATE, TOPK_WINDOWS
from outoforder.stages.interval import Interval, IntervalStage, IntervalSummary, Step
from outoforder.stages.topk.spec import TopKJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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

    def figures(self) -> str:
        """Windows emitted, late memberships, cache decisions, K_min and the candidate list."""
        return (
            f"{self.unscored:,} without a score, {self.windows:,} windows emitted, {self.late:,} late "
            f"memberships, {self.decisions} cache decisions, K_min {self.k_min_us / 1e6:g} s, "
            f"|C| {self.candidates}"
        )


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
    what = "top-k"
    state_table = TOPK_STATE
    tables = (TOPK_WINDOWS, TOPK_RESULTS, TOPK_LATE, TOPK_CACHE)  # the checks read them all, even empty
    summary_type = TopKIntervalSummary

    def tuples(self, bronze: DataFrame) -> DataFrame:
        """See :func:`topk_tuples`."""
        return topk_tuples(bronze, self.job)

    def _restore(self, prev: Mapping[str, Any] | None) -> TopK:
        op = self.job.operator()
        if prev is not None:
            try:
                op.restore(json.loads(prev["snapshot"]))
            except (ValueError, StateError) as err:
                msg = (
                    f"the top-k snapshot of {self.source} ({self.jid}) as of {prev['as_of_us']} is unreadable"
                )
                raise StateError(msg) from err
        return op

    def step(self, interval: Interval, prev: Mapping[str, Any] | None) -> Step:
        """The interval's arrivals through the operator in arrival order; MERGE what it emitted."""
        from pyspark.sql import functions as F

        from outoforder.io import delta

        source, jid, lake, start = self.source, self.jid, self.settings.lake_root, interval.start_us
        op = self._restore(prev)
        rows = self.arrivals(start, interval.end_us).orderBy("seq").toPandas()
        batch = [
            Arrival(int(seq), int(ts), math.nan if score is None else float(score))
            for seq, ts, score in zip(
                rows["seq"].tolist(), rows["ts"].tolist(), rows["score"].tolist(), strict=True
            )
        ]
        ranked = [a for a in batch if not math.isnan(a.value)]  # the operator's arrival index counts these
        first, decided = op.op.index, len(op.op.decisions)
        out = op.process(batch)
        w = self.job.windows()
        windows = [
            (e.window_id, w.bounds(e.window_id)[1], len(e.tids), ranked[e.at_index - first].id, e.cache_us)
            for e in out.emitted
        ]
        results = [(e.window_id, r, t) for e in out.emitted for r, t in enumerate(e.tids, start=1)]
        score_of = {a.id: a.value for a in ranked}
        late = [(x.id, x.window, x.ts, score_of[x.id]) for x in out.late]
        trace = [
            (source, jid, ranked[at - first].id, int(progress), d.k_min_us, d.k_down_us, d.k_up_us, d.move,
             [float(a) for a in d.accuracies], start)
            for d, (at, progress) in zip(op.op.decisions[decided:], op.op.decided_at[decided:], strict=True)
        ]  # fmt: skip

        lit = {"source": F.lit(source), "job": F.lit(jid)}
        if windows:
            wdf = self.spark.createDataFrame(
                windows, "window_id long, window_end_us long, size long, emitted_at_seq long, cache_us double"
            ).select(
                *(v.alias(k) for k, v in lit.items()),
                "*",
                F.lit(start).cast("long").alias("interval_start_us"),
                F.lit(interval.now_us).cast("long").alias("written_at_us"),
            )
            self.append(wdf, TOPK_WINDOWS, interval)
        if results:
            # a list may hold tuples of earlier intervals: look their ts and score up in bronze, reading
            # only the seq range the lists span (Delta skips the other files by their statistics)
            needed = [t for _, _, t in results]
            known = self.tuples(
                delta.read_arrivals(
                    self.spark, BRONZE, lake, source=source, seq_range=(min(needed), max(needed) + 1)
                )
            )
            rdf = self.spark.createDataFrame(results, "window_id long, rank long, seq long").join(
                known, "seq"
            )
            rdf = rdf.select(*(v.alias(k) for k, v in lit.items()), "window_id", "rank", "seq", "ts", "score")
            self.append(rdf, TOPK_RESULTS, interval)
        if late:  # late tuples are this interval's own arrivals: their ts and score are at hand
            ldf = self.spark.createDataFrame(late, "seq long, window_id long, ts long, score double").select(
                *(v.alias(k) for k, v in lit.items()),
                "seq",
                "window_id",
                "ts",
                "score",
                F.lit(start).cast("long").alias("interval_start_us"),
            )
            self.append(ldf, TOPK_LATE, interval)
        if trace:
            self.append(self.spark.createDataFrame(trace, TOPK_CACHE.schema), TOPK_CACHE, interval)
        k_min = float(op.op.cache.k_min_us)
        return Step(
            arrivals=len(batch),
            state={"snapshot": json.dumps(op.snapshot()), "k_min_us": k_min},
            state_rows=op.op.state_rows,  # every entry of the operator's state
            added={"arrivals": len(batch)},
            figures={
                "unscored": len(batch) - len(ranked),
                "windows": len(windows),
                "late": len(late),
                "decisions": len(trace),
                "k_min_us": k_min,
                "candidates": op.op.candidate_count,
            },
        )


def run_interval(
    spark: SparkSession, settings: Settings, source: str, job: TopKJob, start_us: int, end_us: int
) -> TopKIntervalSummary:
    """One interval of the top-k stream (see :class:`TopKStream`)."""
    return TopKStream(spark, settings, source, job).run_interval(start_us, end_us)
