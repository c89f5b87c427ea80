"""Sliding-window aggregates with HPM as a pipeline stage: one arrival-time interval per run.

``aggregate-stream`` (:class:`AggregateStream`, on the skeleton of :mod:`outoforder.stages.interval`)
processes the bronze arrivals of ``[start, end)`` (by ``arrival_ts``) with the Spark twin of HPM's
stream module (:func:`outoforder.spark.buffered.buffered_batch`):

1. the operator state as of ``start`` (t_max, largest delay, close frontier, α, the received
   tuples of open windows, closed windows awaiting their coverage) comes from ``silver/agg_state``,
   ``silver/agg_buffer`` and ``silver/agg_watch``;
2. the buffer's rule is fixed during the interval: the lateness controller's K (the default:
   fixed after it has seen what the windows closed before the interval need with the interval's
   late members counted, :func:`outoforder.spark.buffered.foreseen`), or HPM's α
   (``--controller paper``: ``K = round(α·k)`` per arrival); the windows the frontier
   passes are emitted and appended to ``gold/agg_results`` as version 1 (once per interval: a
   rerun writes nothing, see :mod:`outoforder.stages.interval`);
3. every late membership goes to the ledger ``silver/agg_ledger`` (see
   :mod:`outoforder.stages.aggregate.ledger`);
4. the coverage observations of the interval, each with the K its window needed, then what the
   windows still watched need so far, drive the controller, in window order; each observation
   and the controller after it is kept in ``silver/agg_control`` (the trace). The lateness
   controller runs under the seed's too: its memory of needs makes the feasibility statement
   (the K the target needs, and the share of recent windows a ``--latency-bound-s`` bound lets meet ε);
5. the new state is written last; then the ledger's Γ status file for the scheduler.

The repair is :mod:`outoforder.stages.aggregate.repair`, the checks
:mod:`outoforder.stages.aggregate.validate`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.core.control.pd import PDState
from outoforder.core.windows.slack import HPMSlack, LatenessSlack
from outoforder.io.tables import (
    AGG_BUFFER,
    AGG_CONTROL,
    AGG_LEDGER,
    AGG_RESULTS,
    AGG_STATE,
    AGG_WATCH,
    BRONZE,
)
from outoforder.stages.aggregate.inputs import agg_tuples, of_streams, valued
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.context import StageContext
from outoforder.stages.interval import Interval, IntervalStage, IntervalSummary, Step

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
    controller: str = "lateness"
    slack_next_us: int | None = None  # K for the next interval
    needed_us: int | None = None  # the K the recent windows need (unbounded)
    reachable: float | None = None  # the share of recent windows within the bound
    bound_us: int | None = None
    delta: float = 0.05
    unvalued: int = 0  # arrivals of the job's streams with a null or NaN value: not aggregated

    def figures(self) -> str:
        """Windows emitted, late memberships, buffered tuples, the buffer K, and feasibility."""
        text = (
            f"{self.emitted:,} windows emitted, {self.late:,} late memberships, {self.buffered:,} buffered, "
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


class AggregateStream(IntervalStage[AggJob, AggIntervalSummary]):
    """HPM's stream module over arrival-time intervals.

    With ``repair_each``, :meth:`run` checks the Γ rule (and repairs) after every interval.
    """

    name = "aggregate-stream"
    job_type = AggJob
    what = "aggregate"
    state_table = AGG_STATE
    snapshot_tables = (AGG_BUFFER, AGG_WATCH)
    tables = (AGG_RESULTS, AGG_LEDGER, AGG_CONTROL)
    counters = ("arrivals", "emitted", "late")
    summary_type = AggIntervalSummary

    def __init__(self, ctx: StageContext, repair_each: bool = False, **skeleton: Any) -> None:
        super().__init__(ctx, **skeleton)
        self.repair_each = repair_each

    def tuples(self, bronze: DataFrame) -> DataFrame:
        """See :func:`agg_tuples`."""
        return agg_tuples(bronze, self.job)

    def policies(self, prev: Mapping[str, Any] | None) -> tuple[HPMSlack | LatenessSlack, LatenessSlack]:
        """The controller in force and the lateness controller (the same object unless ``seed``)."""
        lateness = self.job.lateness()
        snap = None if prev is None else prev.get("lateness")
        if snap:
            lateness.restore(json.loads(snap))
        if self.job.controller != "paper":
            return lateness, lateness
        pd = self.job.pd_controller()
        seed = (
            HPMSlack(pd) if prev is None else HPMSlack(pd, PDState(float(prev["alpha"]), prev["last_error"]))
        )
        return seed, lateness

    def step(self, interval: Interval, prev: Mapping[str, Any] | None) -> Step:
        """The buffered window operator over the interval, its rule fixed; then the controller."""
        from pyspark.sql import functions as F

        from outoforder.spark.buffered import (
            MEMBER_SCHEMA,
            WATCH_SCHEMA,
            WindowState,
            apply_observations,
            buffered_batch,
            foreseen,
        )

        source, jid, end = self.source, self.jid, interval.end_us
        if prev is None:
            state = WindowState.empty(self.spark)
        else:
            state = WindowState(
                prev["t_max"],
                int(prev["k"]),
                prev["frontier"],
                prev["last_seq"],
                _columns(self.snapshot(AGG_BUFFER, prev), MEMBER_SCHEMA.fieldNames()),
                _columns(self.snapshot(AGG_WATCH, prev), WATCH_SCHEMA.fieldNames()),
            )
        policy, lateness = self.policies(prev)
        query = self.job.query()
        arrivals = self.arrivals(interval.start_us, end)
        unvalued = self.unvalued(interval.start_us, end)
        if policy.follows_unsettled:  # K reads what the interval's late members tell the closed windows
            needs = foreseen(arrivals, state, query)
            if needs is not None:
                policy.observe_unsettled(needs)
        rule: int | float = policy.state.alpha if isinstance(policy, HPMSlack) else policy.slack(state.k)
        out, new_state = buffered_batch(arrivals, state, query, rule)
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
        k_now = new_state.k
        trace = apply_observations(policy, out)
        shadow = trace if lateness is policy else apply_observations(lateness, out)

        def alpha(snap: Mapping[str, Any]) -> float:  # the seed's α, or what K is of k
            return float(snap["alpha"]) if "alpha" in snap else _ratio(snap["k_us"], k_now)

        control = [
            (source, jid, end, int(wid), int(at), int(n_rcv), int(n_lt), coverage, float(lam), alpha(snap),
             int(need), None if after["k_us"] is None else int(after["k_us"]))
            for wid, at, n_rcv, n_lt, lam, need, (coverage, snap), (_, after) in zip(
                obs["wid"], obs["obs_at"], obs["n_rcv"], obs["n_late"], obs["lambda_thr"], obs["needed_us"],
                trace, shadow, strict=True,
            )
        ]  # fmt: skip
        if control:
            self.append_rows(control, AGG_CONTROL, interval)
        buffered = out.buffered
        n = out.arrivals
        mean_slack = out.slack_sum / n if n else None
        k_next = policy.slack(k_now)
        a_now = policy.state.alpha if isinstance(policy, HPMSlack) else _ratio(k_next, k_now)
        return Step(
            arrivals=n,
            state={
                "t_max": new_state.t_max,
                "k": new_state.k,
                "frontier": new_state.frontier,
                "last_seq": new_state.last_seq,
                "alpha": a_now,
                "last_error": policy.state.last_error if isinstance(policy, HPMSlack) else None,
                "slack_us": k_next,
                "lateness": json.dumps(lateness.snapshot()),
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
                "alpha": a_now,
                "controller": self.job.controller,
                "slack_next_us": k_next,
                "needed_us": lateness.needed_us,
                "reachable": lateness.reachable,
                "bound_us": self.job.latency_bound_us,
                "delta": self.job.delta,
                "unvalued": unvalued,
            },
        )

    def unvalued(self, lo: int, hi: int) -> int:
        """How many arrivals of the job's streams in ``[lo, hi)`` have no value (null or NaN)."""
        from outoforder.io import delta

        bronze = delta.read_arrivals(
            self.spark, BRONZE, self.settings.lake_root, source=self.source, arrival_ts_range=(lo, hi)
        )
        return int(of_streams(bronze, self.job).where(~valued()).count())

    def finish(self, summary: AggIntervalSummary) -> None:
        """Leave the ledger's Γ status for the scheduler (the DAG's ``gamma_rule`` reads it).

        With ``repair_each`` the repair after the interval leaves it instead: it knows what stays
        pending without another look at the ledger.
        """
        from outoforder.stages.aggregate.ledger import write_ledger_status

        if not self.repair_each:
            write_ledger_status(self.ctx)

    def after_interval(self, summary: AggIntervalSummary) -> None:
        """With ``repair_each``: a repair when the Γ rule calls for one, then the ledger's status."""
        if self.repair_each:
            from outoforder.stages.aggregate.ledger import status_of, write_ledger_status
            from outoforder.stages.aggregate.repair import repair

            done = repair(self.ctx)
            log.info("%s", done.line())
            status = status_of(self.source, self.job, done.left)
            write_ledger_status(self.ctx, status)


def _ratio(k_us: int | None, k: int) -> float:
    return 0.0 if k_us is None or k <= 0 else k_us / k


def _columns(df: DataFrame, names: Sequence[str]) -> DataFrame:
    """``df``'s columns ``names``; one missing (a state written before it existed) as nulls."""
    from pyspark.sql import functions as F

    from outoforder.spark.buffered import MEMBER_SCHEMA, WATCH_SCHEMA

    types = {f.name: f.dataType for f in (*MEMBER_SCHEMA.fields, *WATCH_SCHEMA.fields)}
    return df.select(*(F.col(c) if c in df.columns else F.lit(None).cast(types[c]).alias(c) for c in names))


def run_interval(ctx: StageContext, start_us: int, end_us: int) -> AggIntervalSummary:
    """One interval of the aggregate stream (see :class:`AggregateStream`)."""
    return AggregateStream(ctx).run_interval(start_us, end_us)
