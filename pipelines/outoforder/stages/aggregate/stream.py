"""Sliding-window aggregates with HPM as a pipeline stage: one pass per run, K adapted inside it.

``aggregate-stream`` (:class:`AggregateStream`, on the skeleton of :mod:`outoforder.stages.passes`)
runs HPM's stream module (:class:`~outoforder.core.windows.hpm.HPM`) over the bronze arrivals from
where the job stands to the run's end, in one Spark task (:func:`outoforder.spark.agg_pass.agg_pass`):

1. the operator's state (t_max, the largest delay, the close frontier, the policy's state, the
   values of the windows still open, the closed windows awaiting their coverage) comes from the
   newest snapshot in ``silver/agg_state``;
2. each window is emitted once the stream has passed its end by K, and appended to
   ``gold/agg_results`` as version 1. K is the lateness controller's (what the recent windows
   needed, :class:`~outoforder.core.windows.slack.LatenessSlack`) or, with ``--controller paper``,
   HPM's ``K = α·k`` with α set by the PD controller; either sees each window's coverage
   observation as it happens, so K follows the stream, not the runs;
3. every late membership, and every coverage observation with the K it needed and the K after
   it, goes to the ledger ``silver/agg_ledger`` (:mod:`outoforder.stages.aggregate.ledger`). The
   lateness controller runs under the paper's too: its memory of needs makes the feasibility
   statement (the K the target needs, and the share of recent windows a ``--latency-bound-s``
   bound lets meet ε);
4. the new snapshot is written last; then the ledger's Γ status file for the scheduler.

The repair is :mod:`outoforder.stages.aggregate.repair`, the checks
:mod:`outoforder.stages.aggregate.validate`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.io.tables import AGG_LEDGER, AGG_RESULTS, AGG_STATE
from outoforder.stages.aggregate.inputs import of_streams, valued
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.context import StageContext
from outoforder.stages.passes import (
    Computed,
    Pass,
    PassStage,
    PassSummary,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)

# the state's kept rows (an open window's values, the watched windows) as the pass reads them
KEPT_COLUMNS = ["kind", "ord", "wid", "v", "bucket", "n_rcv", "n_late", "lambda_thr", "profile"]
KEPT_SCHEMA = (
    "kind string, ord long, wid long, v double, bucket long, n_rcv long, n_late long, lambda_thr double, "
    "profile string"
)


@dataclass(frozen=True, kw_only=True)
class AggPassSummary(PassSummary):
    """What one run of the aggregate stream did."""

    stage: ClassVar[str] = "aggregate-stream"
    emitted: int
    late: int
    observed: int
    buffered: int
    slack_mean_us: float
    alpha: float
    controller: str = "lateness"
    slack_next_us: int | None = None  # K now
    needed_us: int | None = None  # the K the recent windows need (unbounded)
    reachable: float | None = None  # the share of recent windows within the bound
    bound_us: int | None = None
    delta: float = 0.05
    unvalued: int = 0  # arrivals of the job's streams with a null or NaN value: not aggregated

    def figures(self) -> str:
        """Windows emitted, late memberships, buffered tuples, the buffer K, and feasibility."""
        text = (
            f"{self.emitted:,} windows emitted, {self.late:,} late memberships, {self.buffered:,} kept, "
            f"mean K {self.slack_mean_us / 1000:.1f} ms"
        )
        if self.unvalued:
            text = f"{self.unvalued:,} without a value (not aggregated), {text}"
        if self.controller == "paper":
            text += f", α now {self.alpha:.3f}"
        elif self.slack_next_us is not None:
            text += f", K now {self.slack_next_us / 1000:.1f} ms"
        if self.needed_us is None or self.reachable is None:
            return text
        if self.bound_us is not None and self.reachable < 1.0 - self.delta:
            return (
                f"{text}; (ε, δ) is out of reach under the bound of {self.bound_us / 1e6:g} s: it lets "
                f"{self.reachable:.1%} of the recent windows meet ε, the target needs K >= "
                f"{self.needed_us / 1e6:g} s"
            )
        return f"{text}; the target needs K {self.needed_us / 1000:.1f} ms"


class AggregateStream(PassStage[AggJob, AggPassSummary]):
    """HPM's stream module, one pass per run (see the module docstring).

    With ``repair_each``, a run checks the Γ rule (and repairs) after its pass.
    """

    name = "aggregate-stream"
    job_type = AggJob
    what = "aggregate"
    state_table = AGG_STATE
    outputs = (AGG_RESULTS, AGG_LEDGER)
    counters = ("arrivals", "emitted", "late")
    # the pass's rows of each output table: emitted windows; late memberships and observations
    kinds: ClassVar[Mapping[str, tuple[str, ...]]] = {AGG_RESULTS.name: ("e",), AGG_LEDGER.name: ("l", "o")}
    seq_columns: ClassVar[Mapping[str, str]] = {AGG_RESULTS.name: "emitted_at_seq", AGG_LEDGER.name: "seq"}
    stream_only = (AGG_RESULTS.name,)
    summary_type = AggPassSummary

    def __init__(self, ctx: StageContext, repair_each: bool = False) -> None:
        super().__init__(ctx)
        self.repair_each = repair_each

    def compute(self, p: Pass) -> Computed:
        """The span's arrivals and the kept windows through the operator, in one task."""
        from pyspark.sql import functions as F

        from outoforder.io import delta
        from outoforder.io.tables import BRONZE
        from outoforder.spark.agg_pass import agg_pass
        from outoforder.spark.agg_pass import kept_rows as pass_rows

        lake = self.settings.lake_root
        bronze = delta.read_arrivals(
            self.spark, BRONZE, lake, source=self.source, arrival_ts_range=(p.start_us, p.end_us)
        )
        arrivals = of_streams(bronze, self.job).select(
            F.col("arrival_seq").alias("seq"),
            F.col("event_ts").alias("ts"),
            F.when(valued(), F.col("value")).alias("v"),
            "arrival_ts",
        )
        kept = self.kept(p, ("open", "watch"), KEPT_COLUMNS, KEPT_SCHEMA)
        scalars = None if p.position is None else p.position.scalars
        return self.checkpointed(
            p, agg_pass(arrivals, None if kept is None else pass_rows(kept), self.job, scalars)
        )

    def output_rows(self, table: Table, c: Computed, p: Pass) -> DataFrame:
        """Emitted windows (``e`` rows), or late memberships and observations (``l``, ``o`` rows)."""
        from pyspark.sql import functions as F

        lit = [F.lit(self.source).alias("source"), F.lit(self.jid).alias("job")]
        now = F.lit(p.now_us).cast("long").alias("written_at_us")
        rows = c.out.where(F.col("kind").isin(*self.kinds[table.name]))
        if table is AGG_RESULTS:
            w = self.job.query().windows
            return rows.select(
                *lit,
                F.col("wid").alias("window_id"),
                (F.col("wid") * F.lit(w.slide_us)).alias("window_start_us"),
                (F.col("wid") * F.lit(w.slide_us) + F.lit(w.size_us)).alias("window_end_us"),
                F.col("v").alias("value"),
                F.col("n_rcv").alias("n_tuples"),
                F.lit(1).cast("long").alias("version"),
                F.lit(False).alias("final"),
                F.lit("stream").alias("produced_by"),
                F.lit(None).cast("double").alias("previous_value"),
                F.lit(None).cast("array<long>").alias("caused_by"),
                F.col("v").alias("stream_value"),
                F.col("at_seq").alias("emitted_at_seq"),
                F.col("slack").alias("slack_us"),
                "lambda_thr",
                F.col("at_us").alias("written_by_us"),
                now,
            )
        late = F.col("kind") == "l"
        return rows.select(
            *lit,
            F.when(late, F.lit("late")).otherwise(F.lit("observed")).alias("kind"),
            F.col("wid").alias("window_id"),
            F.when(late, F.col("seq")).otherwise(F.col("at_seq")).alias("seq"),
            F.col("at_us").alias("arrival_us"),
            "ts",
            "n_rcv",
            "n_late",
            "lambda_thr",
            F.col("needed").alias("needed_us"),
            F.col("slack").alias("slack_after_us"),
            now,
        )

    def state_rows(self, c: Computed, p: Pass, row: Mapping[str, Any]) -> DataFrame:
        """The state row, the open windows' values and the watched windows, as of the pass's end."""
        from pyspark.sql import functions as F

        names = AGG_STATE.schema.fieldNames()
        head = self.spark.createDataFrame([tuple(row.get(n) for n in names)], AGG_STATE.schema)
        kept = c.out.where(F.col("kind").isin("m", "w")).select(
            F.lit(self.source).alias("source"),
            F.lit(self.jid).alias("job"),
            F.lit(p.end_us).cast("long").alias("as_of_us"),
            F.when(F.col("kind") == "m", F.lit("open")).otherwise(F.lit("watch")).alias("kind"),
            F.col("seq").alias("ord"),
            "wid",
            "v",
            "bucket",
            "n_rcv",
            "n_late",
            "lambda_thr",
            F.col("text").alias("profile"),
        )
        return head.unionByName(kept, allowMissingColumns=True)

    def summary(self, p: Pass, c: Computed, seconds: float) -> AggPassSummary:
        """The pass's figures (from its state row)."""
        f = c.state["figures"]
        n = int(f["arrivals"])
        return AggPassSummary(
            source=self.source,
            job=self.jid,
            start_us=p.start_us,
            end_us=p.end_us,
            arrivals=n,
            state_rows=int(f["kept"]),
            seconds=seconds,
            emitted=int(f["emitted"]),
            late=int(f["late"]),
            observed=int(f["observed"]),
            buffered=int(f["kept"]),
            slack_mean_us=float(f["slack_sum"]) / n if n else 0.0,
            alpha=float(f["alpha"]),
            controller=self.job.controller,
            slack_next_us=f.get("slack_next_us"),
            needed_us=f.get("needed_us"),
            reachable=f.get("reachable"),
            bound_us=self.job.latency_bound_us,
            delta=self.job.delta,
            unvalued=int(f["unvalued"]),
        )

    def finish(self, summary: AggPassSummary) -> None:
        """The ledger's Γ status for the scheduler; with ``repair_each``, a repair first when it is due."""
        from outoforder.stages.aggregate.ledger import status_of, write_ledger_status

        if self.repair_each:
            from outoforder.stages.aggregate.repair import repair

            done = repair(self.ctx)
            log.info("%s", done.line())
            write_ledger_status(self.ctx, status_of(self.source, self.job, None if done.ran else done.left))
        else:
            write_ledger_status(self.ctx)


def frontier_at(ctx: StageContext, at_us: int | None = None) -> tuple[int, int | None] | None:
    """(as_of, the close frontier) of the job's newest state as of ``at_us``; None before its first pass.

    The frontier is None while nothing has arrived (no window closed).
    """
    from outoforder.core.joins.progress import NEG
    from outoforder.stages.passes import state_row

    job = ctx.job_of(AggJob)
    row = state_row(ctx.settings, AGG_STATE, ctx.bronze_source, job.job_id(), at_us)
    if row is None:
        return None
    frontier = int(json.loads(row["scalars"])["operator"]["frontier"])
    return int(row["as_of_us"]), None if frontier <= NEG else frontier
