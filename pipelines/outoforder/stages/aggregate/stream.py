"""Sliding-window aggregates with HPM as a pipeline stage: one arrival-time interval per run.

``aggregate-stream`` (:class:`AggregateStream`, on the skeleton of :mod:`outoforder.stages.interval`)
processes the bronze arrivals of ``[start, end)`` (by ``arrival_ts``) with the Spark twin of HPM's
stream module (:func:`outoforder.spark.windows.buffered_batch`):

1. the operator state as of ``start`` (t_max, largest delay, close frontier, α, the received
   tuples of open windows, closed windows awaiting their coverage) comes from ``silver/agg_state``,
   ``silver/agg_buffer`` and ``silver/agg_watch``;
2. α is fixed during the interval (``K = round(α·k)`` per arrival); the windows the frontier
   passes are emitted and appended to ``gold/agg_results`` as version 1 (once per interval: a
   rerun writes nothing, see :mod:`outoforder.stages.interval`);
3. every late membership goes to the ledger ``silver/agg_ledger`` (see
   :mod:`outoforder.stages.aggregate.ledger`);
4. the coverage observations of the interval drive the PD controller, in window order; each one
   and the α it led to is kept in ``silver/agg_control`` (the α trace);
5. the new state is written last; then the ledger's Γ status file for the scheduler.

The repair is :mod:`outoforder.stages.aggregate.repair`, the checks
:mod:`outoforder.stages.aggregate.validate`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.config import Settings
from outoforder.core.control.pd import PDState
from outoforder.core.windows.slack import HPMSlack
from outoforder.io.tables import AGG_BUFFER, AGG_CONTROL, AGG_LEDGER, AGG_RESULTS, AGG_STATE, AGG_WATCH
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.interval import Interval, IntervalStage, IntervalSummary, Step

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class AggIntervalSummary(IntervalSummary):
    """What one run of the aggregate stream did."""

    stage: ClassVar[str] = "aggregate-stream"
    emitted: int
    late: int
    buffered: int
    slack_mean_us: float
    alpha: float

    def figures(self) -> str:
        """Windows emitted, late memberships, buffered tuples, the buffer K and α."""
        return (
            f"{self.emitted:,} windows emitted, {self.late:,} late memberships, {self.buffered:,} buffered, "
            f"mean K {self.slack_mean_us / 1000:.1f} ms, α now {self.alpha:.3f}"
        )


def agg_tuples(bronze: DataFrame, job: AggJob) -> DataFrame:
    """Bronze rows of the job's streams with a value, as operator tuples (seq, ts, v)."""
    from pyspark.sql import functions as F

    if job.streams:
        bronze = bronze.where(F.col("stream").isin(*job.streams))
    return bronze.where(F.col("value").isNotNull() & ~F.isnan("value")).select(
        F.col("arrival_seq").alias("seq"), F.col("event_ts").alias("ts"), F.col("value").alias("v")
    )


class AggregateStream(IntervalStage[AggJob, AggIntervalSummary]):
    """HPM's stream module over arrival-time intervals.

    With ``repair_each``, :meth:`run` checks the Γ rule (and repairs) after every interval.
    """

    name = "aggregate-stream"
    what = "aggregate"
    state_table = AGG_STATE
    snapshot_tables = (AGG_BUFFER, AGG_WATCH)
    tables = (AGG_RESULTS, AGG_LEDGER, AGG_CONTROL)
    counters = ("arrivals", "emitted", "late")
    summary_type = AggIntervalSummary

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        source: str,
        job: AggJob,
        repair_each: bool = False,
        **skeleton: Any,
    ) -> None:
        super().__init__(spark, settings, source, job, **skeleton)
        self.repair_each = repair_each

    def tuples(self, bronze: DataFrame) -> DataFrame:
        """See :func:`agg_tuples`."""
        return agg_tuples(bronze, self.job)

    def step(self, interval: Interval, prev: Mapping[str, Any] | None) -> Step:
        """The buffered window operator over the interval, α fixed; then the PD controller."""
        from pyspark.sql import functions as F

        from outoforder.spark.windows import WindowState, apply_observations, buffered_batch

        source, jid, end = self.source, self.jid, interval.end_us
        if prev is None:
            state = WindowState.empty(self.spark)
            policy = HPMSlack(self.job.controller())
        else:
            state = WindowState(
                prev["t_max"],
                int(prev["k"]),
                prev["frontier"],
                prev["last_seq"],
                self.snapshot(AGG_BUFFER, prev).select("wid", "seq", "ts", "v"),
                self.snapshot(AGG_WATCH, prev).select("wid", "n_rcv", "n_late", "lambda_thr"),
            )
            policy = HPMSlack(self.job.controller(), PDState(float(prev["alpha"]), prev["last_error"]))
        query = self.job.query()
        out, new_state = buffered_batch(
            self.arrivals(interval.start_us, end), state, query, policy.state.alpha
        )
        w = query.windows

        em = out.emitted
        results = [
            (
                source, jid, int(r["wid"]), int(r["wid"]) * w.slide_us,
                int(r["wid"]) * w.slide_us + w.size_us, float(r["value"]), int(r["n_rcv"]), 1, False,
                "stream", None, None, float(r["value"]), int(r["emitted_at"]), int(r["slack_at_close"]),
                float(r["lambda_thr"]), end, interval.now_us,
            )
            for r in em.to_dict("records")
        ]  # fmt: skip
        if results:
            self.append_rows(results, AGG_RESULTS, interval)
        n_late = out.late_count
        if n_late:
            late = out.late.select(
                F.lit(source).alias("source"),
                F.lit(jid).alias("job"),
                "seq",
                "ts",
                F.col("wid").alias("window_id"),
                F.lit(end).cast("long").alias("interval_end_us"),
            )
            self.append(late, AGG_LEDGER, interval)

        obs = out.observations
        trace = apply_observations(policy, obs)
        control = [
            (source, jid, end, int(wid), int(at), int(n_rcv), int(n_lt), coverage, float(lam),
             float(snap["alpha"]))
            for wid, at, n_rcv, n_lt, lam, (coverage, snap) in zip(
                obs["wid"], obs["obs_at"], obs["n_rcv"], obs["n_late"], obs["lambda_thr"], trace, strict=True
            )
        ]  # fmt: skip
        if control:
            self.append_rows(control, AGG_CONTROL, interval)
        buffered = out.buffered
        n = out.arrivals
        mean_slack = out.slack_sum / n if n else None
        return Step(
            arrivals=n,
            state={
                "t_max": new_state.t_max,
                "k": new_state.k,
                "frontier": new_state.frontier,
                "last_seq": new_state.last_seq,
                "alpha": policy.state.alpha,
                "last_error": policy.state.last_error,
            },
            # buffered tuples and watched windows (what stream.state_budget_rows bounds)
            state_rows=buffered + out.watched,
            snapshots={AGG_BUFFER.name: new_state.buffer, AGG_WATCH.name: new_state.watch},
            added={"arrivals": n, "emitted": len(em), "late": n_late},
            figures={
                "emitted": len(em),
                "late": n_late,
                "buffered": buffered,
                "slack_mean_us": float(mean_slack) if mean_slack is not None else 0.0,
                "alpha": policy.state.alpha,
            },
        )

    def finish(self, summary: AggIntervalSummary) -> None:
        """Leave the ledger's Γ status for the scheduler (the DAG's ``gamma_rule`` reads it).

        With ``repair_each`` the repair after the interval leaves it instead: it knows what stays
        pending without another look at the ledger.
        """
        from outoforder.stages.aggregate.ledger import write_ledger_status

        if not self.repair_each:
            write_ledger_status(self.spark, self.settings, self.source, self.job)

    def after_interval(self, summary: AggIntervalSummary) -> None:
        """With ``repair_each``: a repair when the Γ rule calls for one, then the ledger's status."""
        if self.repair_each:
            from outoforder.stages.aggregate.ledger import status_of, write_ledger_status
            from outoforder.stages.aggregate.repair import repair

            done = repair(self.spark, self.settings, self.source, self.job)
            log.info("%s", done.line())
            status = status_of(self.source, self.job, done.left)
            write_ledger_status(self.spark, self.settings, self.source, self.job, status)


def run_interval(
    spark: SparkSession, settings: Settings, source: str, job: AggJob, start_us: int, end_us: int
) -> AggIntervalSummary:
    """One interval of the aggregate stream (see :class:`AggregateStream`)."""
    return AggregateStream(spark, settings, source, job).run_interval(start_us, end_us)
