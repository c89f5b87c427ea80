"""Continuous top-k as a pipeline stage: one pass per run, the cache duration adapted inside it.

``topk-stream`` (:class:`TopKStream`, on the skeleton of :mod:`outoforder.stages.passes`) runs the
pure operator :class:`~outoforder.core.topk.operator.TopK` over the bronze arrivals from where the
job stands to the run's end:

1. the operator and its cache controller are restored from the JSON snapshot of the newest state
   row in ``silver/topk_state``;
2. the arrivals go through the operator in arrival order, in one Spark task
   (:func:`outoforder.spark.topk.topk_pass`): a state machine over one arrival order, sequential by
   nature, whose state is small (k entries per open window) and all the driver learns. The cache
   duration K is decided at the controller's own cadence, window by window;
3. every emitted window goes to ``gold/topk_results`` with its list (a row per member; one row with
   no rank when it was emitted empty); every tuple that arrives after its window's emission, every
   controller decision (the K_min trace, with the lateness controller's statement: the K the target
   needs and the accuracy the bound allows) and every window settled (its late tuples awaited:
   its hit rate and the lateness of its true top-k, from which the checks tell a target missed by
   the controller from one the bound put out of reach) go to ``silver/topk_ledger``;
4. the new snapshot is written last.

A tuple with a null or NaN score is not ranked; it is counted. The checks are
:mod:`outoforder.stages.topk.validate`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.errors import StateError
from outoforder.io.tables import TOPK_LEDGER, TOPK_RESULTS, TOPK_STATE
from outoforder.stages.context import StageContext
from outoforder.stages.passes import (
    Computed,
    Pass,
    PassStage,
    PassSummary,
)
from outoforder.stages.topk.spec import TopKJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from outoforder.io.tables import Table


@dataclass(frozen=True, kw_only=True)
class TopKPassSummary(PassSummary):
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
    """Bronze rows of the job's streams as operator input: seq, ts, score (null for NaN), arrival_ts."""
    from pyspark.sql import functions as F

    if job.streams:
        bronze = bronze.where(F.col("stream").isin(*job.streams))
    score = F.col(job.score)
    return bronze.select(
        F.col("arrival_seq").alias("seq"),
        F.col("event_ts").alias("ts"),
        F.when(F.isnan(score), None).otherwise(score).alias("score"),
        "arrival_ts",
    )


class TopKStream(PassStage[TopKJob, TopKPassSummary]):
    """The continuous top-k, one pass per run (see the module docstring)."""

    name = "topk-stream"
    job_type = TopKJob
    what = "top-k"
    state_table = TOPK_STATE
    outputs = (TOPK_RESULTS, TOPK_LEDGER)
    # the pass's rows of each output table: emitted lists; late memberships, decisions, settled windows
    kinds: ClassVar[Mapping[str, tuple[str, ...]]] = {
        TOPK_RESULTS.name: ("r",),
        TOPK_LEDGER.name: ("l", "c", "q"),
    }
    seq_columns: ClassVar[Mapping[str, str]] = {TOPK_RESULTS.name: "emitted_at_seq", TOPK_LEDGER.name: "seq"}
    summary_type = TopKPassSummary

    def compute(self, p: Pass) -> Computed:
        """The span's arrivals through the operator in a Spark task."""
        from outoforder.io import delta
        from outoforder.io.tables import BRONZE
        from outoforder.spark.topk import topk_pass

        op = self.job.operator()
        snapshot = None
        if p.position is not None:  # checked here (it is small) so that a bad one fails with its name
            snapshot = p.position.scalars
            try:
                op.restore(json.loads(snapshot)["operator"])
            except (ValueError, KeyError, TypeError, StateError) as err:
                at = p.position.as_of_us
                msg = f"the top-k snapshot of {self.source} ({self.jid}) as of {at} is unreadable"
                raise StateError(msg) from err
        bronze = delta.read_arrivals(
            self.spark,
            BRONZE,
            self.settings.lake_root,
            source=self.source,
            arrival_ts_range=(p.start_us, p.end_us),
        )
        return self.checkpointed(p, topk_pass(topk_tuples(bronze, self.job), op.query, op.cache, snapshot))

    def output_rows(self, table: Table, c: Computed, p: Pass) -> DataFrame:
        """Emitted windows' lists (``r`` rows), or late memberships, decisions, settled windows."""
        from pyspark.sql import functions as F

        lit = [F.lit(self.source).alias("source"), F.lit(self.jid).alias("job")]
        now = F.lit(p.now_us).cast("long").alias("written_at_us")
        rows = c.out.where(F.col("kind").isin(*self.kinds[table.name]))
        if table is TOPK_RESULTS:
            return rows.select(
                *lit,
                "window_id",
                "window_end_us",
                "size",
                F.col("at_seq").alias("emitted_at_seq"),
                F.col("at_us").alias("emitted_at_us"),
                F.col("x").alias("cache_us"),
                "rank",
                "seq",
                "ts",
                "score",
                now,
            )
        kind = F.col("kind")
        decision = F.from_json(
            "text", "move string, accuracy array<double>, needed_us double, reachable double"
        )
        settled = F.from_json("text", "cache_us double, lateness array<double>")
        is_c, is_q = kind == "c", kind == "q"
        return rows.select(
            *lit,
            F.when(kind == "l", F.lit("late"))
            .when(is_c, F.lit("decision"))
            .otherwise(F.lit("settled"))
            .alias("kind"),
            "window_id",
            F.when(is_c, F.col("at_seq")).otherwise(F.col("seq")).alias("seq"),
            F.col("at_us").alias("arrival_us"),
            "ts",
            "score",
            F.when(is_c, F.col("a")).alias("progress_us"),
            F.when(is_c, F.col("x")).alias("k_min_us"),
            F.when(is_c, F.col("y")).alias("k_down_us"),
            F.when(is_c, F.col("z")).alias("k_up_us"),
            F.when(is_c, decision["move"]).alias("move"),
            F.when(is_c, decision["accuracy"]).alias("accuracy"),
            F.when(is_c, decision["needed_us"]).alias("needed_us"),
            F.when(is_c, decision["reachable"]).alias("reachable"),
            F.when(is_q, F.col("window_end_us")).alias("window_end_us"),
            F.when(is_q, F.col("x")).alias("hit"),
            F.when(is_q, settled["cache_us"]).alias("cache_us"),
            F.when(is_q, F.col("y")).alias("exact_us"),
            F.when(is_q, F.col("z")).alias("awaited_us"),
            F.when(is_q, settled["lateness"]).alias("lateness"),
            now,
        )

    def state_rows(self, c: Computed, p: Pass, row: Mapping[str, Any]) -> DataFrame:
        """The state row (the operator's snapshot in its scalars)."""
        names = TOPK_STATE.schema.fieldNames()
        return self.spark.createDataFrame([tuple(row.get(n) for n in names)], TOPK_STATE.schema)

    def summary(self, p: Pass, c: Computed, seconds: float) -> TopKPassSummary:
        """The pass's figures (from its state row)."""
        f = c.state["figures"]
        rows = f["rows"]
        return TopKPassSummary(
            source=self.source,
            job=self.jid,
            start_us=p.start_us,
            end_us=p.end_us,
            arrivals=int(f["arrivals"]),
            state_rows=int(f["kept"]),
            seconds=seconds,
            unscored=int(f["unscored"]),
            windows=int(f["windows"]),
            late=int(rows["l"]),
            decisions=int(rows["c"]),
            k_min_us=float(f["k_min_us"]),
            candidates=int(f["candidates"]),
            settled=int(rows["q"]),
            needed_us=f.get("needed_us"),
            reachable=f.get("reachable"),
            bound_us=self.job.latency_bound_us,
        )


def run_pass(
    ctx: StageContext, start_us: int | None = None, end_us: int | None = None
) -> TopKPassSummary | None:
    """One pass of the top-k stream (see :class:`TopKStream`)."""
    return TopKStream(ctx).run(start_us, end_us)
