"""Sliding-window aggregates with HPM as a pipeline: stream per interval, repair by the Γ rule.

``aggregate-stream`` (:func:`run_interval`) processes the bronze arrivals of ``[start, end)`` (by
``arrival_ts``) with the Spark twin of HPM's stream module (:func:`outoforder.spark.windows.buffered_batch`):

1. the operator state as of ``start`` (t_max, largest delay, close frontier, α, the received
   tuples of open windows, closed windows awaiting their coverage) comes from ``silver/agg_state``,
   ``silver/agg_buffer`` and ``silver/agg_watch`` (the first interval starts empty; a run that
   would skip arrivals fails and names the interval to run first);
2. α is fixed during the interval (``K = round(α·k)`` per arrival); the windows the frontier
   passes are emitted and MERGEd into ``gold/agg_results`` as version 1 (a re-run inserts nothing);
3. every late membership goes to the ledger ``silver/agg_ledger``;
4. the coverage observations of the interval drive the PD controller, in window order; each one
   and the α it led to is kept in ``silver/agg_control`` (the α trace);
5. the new state is written last, so a crash re-runs the interval from the old one.

``aggregate-repair`` (:func:`repair`) looks at the *pending* ledger (entries newer than the last
repair). When their event times span more than Γ (or when forced), it recomputes every affected
window exactly from bronze (the arrivals up to the newest ledger interval), reading only the
event-time ranges of those windows, and MERGEs: a changed value gets version + 1, ``final``, the
previous value and the late tuples that caused it; an unchanged one only becomes ``final``; a
window the stream never emitted (all its tuples were late) is inserted. The repair is recorded in
``gold/agg_repairs`` last: a re-run after a crash recomputes the same values and changes nothing.

``validate-aggregate`` (:func:`validate`) runs Great Expectations on the results against an
exact recomputation of bronze: every window once (no duplicates; after a full repair, no gaps);
the stream's error at emission meets (ε, δ) (the share of windows with error < ε is at least
1 − δ); every window without pending late tuples equals the exact value.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from outoforder.config import Settings
from outoforder.core.control.pd import PDController, PDState
from outoforder.core.windows.assign import Windows
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.quality import rank_error, relative_error
from outoforder.core.windows.repair import gamma_due, window_runs
from outoforder.core.windows.slack import HPMSlack
from outoforder.errors import InputError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages import intervals
from outoforder.stages.intervals import check_state_budget, prune_snapshots, snapshot_before, where_job

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class AggJob:
    """What to aggregate and the quality target (defaults: HPM's experiments, SEEDS.md §2)."""

    streams: tuple[str, ...] = ()  # empty: every stream of the source
    aggregate: str = "sum"
    size_us: int = 500_000
    slide_us: int = 100_000
    eps: float = 0.05
    delta: float = 0.05
    k_p: float = 0.2
    k_d: float = 4.0
    alpha_initial: float = 0.6
    alpha_min: float = 0.05  # K never below 5 % of the largest delay (see docs/aggregates.md)
    coverage_horizon_us: int = 1_000_000
    gamma_us: int = 5_000_000

    @classmethod
    def from_options(cls, opts: Mapping[str, Any]) -> AggJob:
        """From the options the CLI and the DAG Params share (window_ms, slide_ms, eps, ...)."""
        return cls(
            streams=tuple(s for s in str(opts.get("streams") or "").split(",") if s),
            aggregate=str(opts.get("aggregate", "sum")),
            size_us=round(float(opts.get("window_ms", 500.0)) * 1000),
            slide_us=round(float(opts.get("slide_ms", 100.0)) * 1000),
            eps=float(opts.get("eps", 0.05)),
            delta=float(opts.get("delta", 0.05)),
            k_p=float(opts.get("kp", 0.2)),
            k_d=float(opts.get("kd", 4.0)),
            alpha_initial=float(opts.get("alpha0", 0.6)),
            alpha_min=float(opts.get("alpha_min", 0.05)),
            coverage_horizon_us=round(float(opts.get("horizon_ms", 1000.0)) * 1000),
            gamma_us=round(float(opts.get("gamma_s", 5.0)) * 1e6),
        )

    def query(self) -> WindowQuery:
        """The window query and its target."""
        return WindowQuery(
            Windows(self.size_us, self.slide_us),
            self.aggregate,
            self.eps,
            self.delta,
            self.coverage_horizon_us,
        )

    def controller(self) -> PDController:
        """HPM's PD controller (the target coverage is given per window)."""
        return PDController(
            lambda_thr=1.0 - self.eps,
            k_p=self.k_p,
            k_d=self.k_d,
            alpha_initial=self.alpha_initial,
            alpha_min=self.alpha_min,
        )


def job_id(job: AggJob) -> str:
    """A short stable id of an aggregate job (Γ is left out: it paces the repair, not the stream).

    >>> job_id(AggJob()) == job_id(AggJob()), job_id(AggJob(aggregate="avg")) == job_id(AggJob())
    (True, False)
    """
    spec = {k: v for k, v in asdict(job).items() if k != "gamma_us"}  # Γ paces repairs, not the stream
    return "ag-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class IntervalSummary:
    """What one run of the stream stage did."""

    source: str
    job: str
    start_us: int
    end_us: int
    arrivals: int
    emitted: int
    late: int
    buffered: int
    slack_mean_us: float
    alpha: float
    seconds: float
    state_rows: int = 0  # buffered tuples and watched windows (what stream.state_budget_rows bounds)

    def line(self) -> str:
        """One progress line."""
        return (
            f"[aggregate-stream] {self.source} [{self.start_us}, {self.end_us}): {self.arrivals:,} arrivals, "
            f"{self.emitted:,} windows emitted, {self.late:,} late memberships, {self.buffered:,} buffered, "
            f"mean K {self.slack_mean_us / 1000:.1f} ms, α now {self.alpha:.3f}, {self.seconds:.1f} s"
        )


def _tuples(df: DataFrame, job: AggJob) -> DataFrame:
    """Bronze rows of the job's streams with a value, as operator tuples (seq, ts, v)."""
    from pyspark.sql import functions as F

    if job.streams:
        df = df.where(F.col("stream").isin(*job.streams))
    return df.where(F.col("value").isNotNull() & ~F.isnan("value")).select(
        F.col("arrival_seq").alias("seq"), F.col("event_ts").alias("ts"), F.col("value").alias("v")
    )


def _arrivals(
    spark: SparkSession, settings: Settings, source: str, job: AggJob, lo: int, hi: int
) -> DataFrame:
    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    return _tuples(
        delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, arrival_ts_range=(lo, hi)), job
    )


@retry_on_conflict
def run_interval(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: AggJob,
    start_us: int,
    end_us: int,
    keep_snapshots: int = 48,
) -> IntervalSummary:
    """Process the arrivals of ``[start_us, end_us)``; idempotent (see the module docstring)."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import AGG_BUFFER, AGG_CONTROL, AGG_LEDGER, AGG_RESULTS, AGG_STATE, AGG_WATCH
    from outoforder.spark.windows import WindowState, apply_observations, buffered_batch

    if end_us <= start_us:
        msg = f"empty interval [{start_us}, {end_us})"
        raise InputError(msg)
    t0 = time.monotonic()
    jid = job_id(job)
    lake = settings.lake_root
    for t in (AGG_STATE, AGG_BUFFER, AGG_WATCH, AGG_RESULTS, AGG_LEDGER, AGG_CONTROL):
        delta.ensure(spark, t, lake)

    def has_arrivals(lo: int, hi: int) -> bool:
        return bool(_arrivals(spark, settings, source, job, lo, hi).limit(1).count())

    prev = snapshot_before(spark, settings, AGG_STATE, source, jid, start_us, has_arrivals, "aggregate")
    policy = HPMSlack(job.controller())
    if prev is None:
        state = WindowState.empty(spark)
        counts = {"arrivals": 0, "emitted": 0, "late": 0}
        first_start = start_us
    else:
        snap = where_job(source, jid) & (F.col("as_of_us") == prev["as_of_us"])
        state = WindowState(
            prev["t_max"],
            int(prev["k"]),
            prev["frontier"],
            prev["last_seq"],
            delta.read(spark, AGG_BUFFER, lake).where(snap).select("wid", "seq", "ts", "v"),
            delta.read(spark, AGG_WATCH, lake).where(snap).select("wid", "n_rcv", "n_late", "lambda_thr"),
        )
        policy.state = PDState(float(prev["alpha"]), prev["last_error"])
        counts = {k: int(prev[k]) for k in ("arrivals", "emitted", "late")}
        first_start = int(prev["interval_start_us"])
    assert policy.state is not None
    alpha = policy.state.alpha
    batch = _arrivals(spark, settings, source, job, start_us, end_us).localCheckpoint()
    out, new_state = buffered_batch(batch, state, job.query(), alpha)
    now_us = time.time_ns() // 1000
    w = job.query().windows

    em = out.emitted
    results = spark.createDataFrame(
        [
            (
                source,
                jid,
                int(r["wid"]),
                int(r["wid"]) * w.slide_us,
                int(r["wid"]) * w.slide_us + w.size_us,
                float(r["value"]),
                int(r["n_rcv"]),
                1,
                False,
                "stream",
                None,
                None,
                float(r["value"]),
                int(r["emitted_at"]),
                int(r["slack_at_close"]),
                float(r["lambda_thr"]),
                end_us,
                now_us,
            )
            for r in em.to_dict("records")
        ],
        AGG_RESULTS.schema,
    )
    delta.merge_new(results, AGG_RESULTS, lake, ("source", "job", "window_id"))
    late = out.late.select(
        F.lit(source).alias("source"),
        F.lit(jid).alias("job"),
        "seq",
        "ts",
        F.col("wid").alias("window_id"),
        F.lit(end_us).cast("long").alias("interval_end_us"),
    ).localCheckpoint()
    n_late = late.count()
    delta.merge_new(late, AGG_LEDGER, lake, ("source", "job", "seq", "window_id"))

    trace = apply_observations(policy, out.observations)
    obs = out.observations
    control = [
        (
            source,
            jid,
            end_us,
            int(wid),
            int(at),
            int(n_rcv),
            int(n_lt),
            coverage,
            float(lam),
            float(snap["alpha"]),
        )
        for wid, at, n_rcv, n_lt, lam, (coverage, snap) in zip(
            obs["wid"], obs["obs_at"], obs["n_rcv"], obs["n_late"], obs["lambda_thr"], trace, strict=True
        )
    ]
    snap_key: dict[str, str | int] = {"source": source, "job": jid, "as_of_us": end_us}
    delta.replace_where(
        spark.createDataFrame(control, AGG_CONTROL.schema),
        AGG_CONTROL,
        lake,
        {"source": source, "job": jid, "interval_end_us": end_us},
    )
    buffered = new_state.buffer.count()
    state_rows = buffered + new_state.watch.count()
    check_state_budget(settings, "aggregate", source, jid, end_us, state_rows)
    tagged = [
        F.lit(source).alias("source"),
        F.lit(jid).alias("job"),
        F.lit(end_us).cast("long").alias("as_of_us"),
    ]
    delta.replace_where(new_state.buffer.select(*tagged, "wid", "seq", "ts", "v"), AGG_BUFFER, lake, snap_key)
    delta.replace_where(
        new_state.watch.select(*tagged, "wid", "n_rcv", "n_late", "lambda_thr"), AGG_WATCH, lake, snap_key
    )
    slack_stats = out.slack.agg(F.count("*"), F.avg("slack")).first()
    n = int(slack_stats[0]) if slack_stats is not None else 0
    counts = {
        "arrivals": counts["arrivals"] + n,
        "emitted": counts["emitted"] + len(em),
        "late": counts["late"] + n_late,
    }
    state_row = [
        (
            source,
            jid,
            end_us,
            first_start,
            new_state.t_max,
            new_state.k,
            new_state.frontier,
            new_state.last_seq,
            policy.state.alpha,
            policy.state.last_error,
            counts["arrivals"],
            counts["emitted"],
            counts["late"],
            now_us,
        )
    ]
    delta.replace_where(spark.createDataFrame(state_row, AGG_STATE.schema), AGG_STATE, lake, snap_key)
    prune_snapshots(spark, settings, AGG_STATE, (AGG_BUFFER, AGG_WATCH), source, jid, keep_snapshots)
    write_ledger_status(spark, settings, source, job)
    return IntervalSummary(
        source,
        jid,
        start_us,
        end_us,
        n,
        len(em),
        n_late,
        buffered,
        float(slack_stats[1]) if slack_stats is not None and slack_stats[1] is not None else 0.0,
        policy.state.alpha,
        time.monotonic() - t0,
        state_rows,
    )


def last_processed(spark: SparkSession, settings: Settings, source: str, job: AggJob) -> int | None:
    """The end of the newest interval the job has processed (None before its first run)."""
    from outoforder.io.tables import AGG_STATE

    return intervals.last_processed(spark, settings, AGG_STATE, source, job_id(job))


def pending_span(spark: SparkSession, settings: Settings, source: str, job: AggJob) -> tuple[int, int] | None:
    """The arrivals still to aggregate: [resume point, newest arrival + 1), or None."""
    return intervals.pending_span(spark, settings, source, last_processed(spark, settings, source, job))


# --- repair ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairSummary:
    """What one repair check did (``ran`` is False when nothing was pending or Γ was not met)."""

    source: str
    job: str
    ran: bool
    reason: str
    late_tuples: int = 0
    late_span_us: int = 0
    windows: int = 0
    changed: int = 0
    added: int = 0
    rows_read: int = 0
    affected_rows: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        """One progress line."""
        if not self.ran:
            return f"[aggregate-repair] {self.source} ({self.job}): no repair: {self.reason}"
        return (
            f"[aggregate-repair] {self.source} ({self.job}): {self.reason}: {self.late_tuples:,} late tuples "
            f"spanning {self.late_span_us / 1e6:.2f} s -> {self.windows:,} windows recomputed, "
            f"{self.changed:,} changed, {self.added:,} added; read {self.rows_read:,} rows for "
            f"{self.affected_rows:,} rows in the affected windows, {self.seconds:.1f} s"
        )


def pending_ledger(spark: SparkSession, settings: Settings, source: str, job: AggJob) -> DataFrame:
    """Ledger entries newer than the last repair."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import AGG_LEDGER, AGG_REPAIRS

    jid = job_id(job)
    for t in (AGG_LEDGER, AGG_REPAIRS):
        delta.ensure(spark, t, settings.lake_root)
    done = (
        delta.read(spark, AGG_REPAIRS, settings.lake_root)
        .where(where_job(source, jid))
        .agg(F.max("repair_id"))
        .first()
    )
    upto = -(2**62) if done is None or done[0] is None else int(done[0])
    return delta.read(spark, AGG_LEDGER, settings.lake_root).where(
        where_job(source, jid) & (F.col("interval_end_us") > F.lit(upto))
    )


def status_path(settings: Settings, source: str, job: AggJob) -> Path:
    """Where the stream stage leaves the ledger's Γ status for the scheduler (a small JSON file).

    The ``aggregate_stream`` DAG reads it without Spark to decide whether to trigger ``late_repair``.
    """
    safe = source.replace("/", "__")
    return settings.work_dir / "status" / "aggregate" / f"{safe}__{job_id(job)}.json"


def ledger_status(spark: SparkSession, settings: Settings, source: str, job: AggJob) -> dict[str, Any]:
    """The pending ledger's size and event-time span, and whether the Γ rule calls for a repair."""
    summary = _pending_summary(pending_ledger(spark, settings, source, job))
    n, span = (0, 0) if summary is None else (summary.late_tuples, summary.span_us)
    return {
        "source": source,
        "job": job_id(job),
        "pending_late_tuples": n,
        "pending_span_us": span,
        "gamma_us": job.gamma_us,
        "repair_due": summary is not None and summary.due(job.gamma_us),
    }


@dataclass(frozen=True)
class _Pending:
    """The pending ledger in figures: late tuples, their event-time range, newest interval, windows."""

    late_tuples: int
    lo_ts: int
    hi_ts: int
    upto_us: int
    windows: int

    @property
    def span_us(self) -> int:
        return self.hi_ts - self.lo_ts

    def due(self, gamma_us: int) -> bool:
        """HPM's Γ rule on the pending tuples' event times."""
        return gamma_due(np.array([self.lo_ts, self.hi_ts], dtype=np.int64), gamma_us)


def _pending_summary(pending: DataFrame) -> _Pending | None:
    """One aggregation over the pending ledger (None when it is empty)."""
    from pyspark.sql import functions as F

    row = pending.agg(
        F.countDistinct("seq"),
        F.min("ts"),
        F.max("ts"),
        F.max("interval_end_us"),
        F.countDistinct("window_id"),
    ).first()
    if row is None or not row[0]:
        return None
    return _Pending(*(int(x) for x in row))


def write_ledger_status(spark: SparkSession, settings: Settings, source: str, job: AggJob) -> dict[str, Any]:
    """Compute :func:`ledger_status` and write it to :func:`status_path` (atomically)."""
    status = ledger_status(spark, settings, source, job)
    path = status_path(settings, source, job)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status, indent=1))
    tmp.replace(path)
    return status


def window_members(tuples: DataFrame, job: AggJob) -> DataFrame:
    """(seq, v, wid): one row per window membership of tuples (seq, ts, v)."""
    from pyspark.sql import functions as F

    from outoforder.spark.windows import memberships

    return tuples.select("seq", "v", F.explode(memberships(tuples, job.query().windows)).alias("wid"))


def exact_windows(tuples: DataFrame, job: AggJob, ids: DataFrame | None = None) -> DataFrame:
    """(wid, value, n_rcv, s1, s2): the exact aggregate of every window over ``tuples`` (seq, ts, v).

    Restricted to the window ids in ``ids`` (column ``wid``) when given.
    """
    from pyspark.sql import functions as F

    from outoforder.spark.windows import aggregate

    members = window_members(tuples, job)
    if ids is not None:
        members = members.join(F.broadcast(ids.select("wid").distinct()), "wid")
    return aggregate(members, job.aggregate)


@retry_on_conflict
def repair(
    spark: SparkSession, settings: Settings, source: str, job: AggJob, force: bool = False
) -> RepairSummary:
    """Run one repair if the Γ rule (or ``force``) calls for it; idempotent."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import AGG_REPAIRS, AGG_RESULTS, BRONZE

    t0 = time.monotonic()
    jid = job_id(job)
    lake = settings.lake_root
    delta.ensure(spark, AGG_RESULTS, lake)
    pending = pending_ledger(spark, settings, source, job).localCheckpoint()
    todo = _pending_summary(pending)
    if todo is None:
        return RepairSummary(source, jid, False, "the ledger has no pending late tuples")
    n_late, span, upto, n_windows = todo.late_tuples, todo.span_us, todo.upto_us, todo.windows
    due = todo.due(job.gamma_us)
    if not due and not force:
        return RepairSummary(
            source,
            jid,
            False,
            f"{n_late} pending late tuples span {span / 1e6:.2f} s <= Γ = {job.gamma_us / 1e6:g} s",
        )
    w = job.query().windows
    targets = pending.select(F.col("window_id").alias("wid")).distinct()
    ids = np.array([int(r[0]) for r in targets.collect()], dtype=np.int64)
    ranges = window_runs(ids, w)
    cond = None
    for lo, hi in ranges:
        part = (F.col("event_ts") >= F.lit(lo)) & (F.col("event_ts") < F.lit(hi))
        cond = part if cond is None else cond | part
    assert cond is not None
    read = _tuples(
        delta.read_arrivals(spark, BRONZE, lake, source=source).where(
            (F.col("arrival_ts") < F.lit(upto)) & cond
        ),
        job,
    ).localCheckpoint()
    rows_read = read.count()
    exact = exact_windows(read, job, targets).localCheckpoint()
    # rows of bronze that belong to an affected window (what an ideal repair would read)
    affected_rows = (
        window_members(read, job).join(F.broadcast(targets), "wid").select("seq").distinct().count()
    )
    causes = pending.groupBy(F.col("window_id").alias("wid")).agg(
        F.sort_array(F.collect_set("seq")).alias("caused_by")
    )
    current = delta.read(spark, AGG_RESULTS, lake).where(where_job(source, jid))
    now_us = time.time_ns() // 1000

    def same_as(col: str) -> Column:
        return F.col(col).isNotNull() & (
            F.abs(F.col("value") - F.col(col)) <= F.lit(1e-9) * F.abs(F.col("value")) + F.lit(1e-12)
        )

    # A run killed between the results MERGE and the log row leaves results this repair already
    # wrote (produced_by "repair", written_by_us = upto): the log counts them against the value
    # they replaced, so the rerun logs what an uninterrupted repair would have.
    mine = (F.col("produced_by") == "repair") & (F.col("written_by_us") == F.lit(upto))
    joined = (
        exact.join(causes, "wid", "left")
        .join(
            current.select(
                F.col("window_id").alias("wid"),
                F.col("value").alias("old"),
                "version",
                F.when(mine, F.col("previous_value")).otherwise(F.col("value")).alias("before"),
            ),
            "wid",
            "left",
        )
        .withColumn("same", same_as("old"))
        .localCheckpoint()
    )
    changed = joined.where(F.col("before").isNotNull() & ~same_as("before")).count()
    added = joined.where(F.col("before").isNull()).count()
    updates = joined.select(
        F.lit(source).alias("source"),
        F.lit(jid).alias("job"),
        F.col("wid").alias("window_id"),
        (F.col("wid") * F.lit(w.slide_us)).alias("window_start_us"),
        (F.col("wid") * F.lit(w.slide_us) + F.lit(w.size_us)).alias("window_end_us"),
        "value",
        F.col("n_rcv").alias("n_tuples"),
        F.coalesce(F.col("version") + 1, F.lit(1)).cast("long").alias("version"),
        F.lit(True).alias("final"),
        F.lit("repair").alias("produced_by"),
        F.col("old").alias("previous_value"),
        "caused_by",
        F.lit(None).cast("double").alias("stream_value"),
        F.lit(None).cast("long").alias("emitted_at_seq"),
        F.lit(None).cast("long").alias("slack_us"),
        F.lit(None).cast("double").alias("lambda_thr"),
        F.lit(upto).cast("long").alias("written_by_us"),
        F.lit(now_us).cast("long").alias("written_at_us"),
        "same",
    )
    target = DeltaTable.forPath(spark, AGG_RESULTS.path(lake))
    changed_cols = [
        "value",
        "n_tuples",
        "version",
        "final",
        "produced_by",
        "previous_value",
        "caused_by",
        "written_by_us",
        "written_at_us",
    ]
    (
        target.alias("t")
        .merge(
            updates.alias("n"),
            f"t.source = '{source}' AND t.job = '{jid}' AND t.source = n.source AND t.job = n.job "
            "AND t.window_id = n.window_id",
        )
        .whenMatchedUpdate(condition="NOT n.same", set={c: f"n.{c}" for c in changed_cols})
        .whenMatchedUpdate(
            condition="n.same AND NOT t.final", set={"final": "true", "written_at_us": "n.written_at_us"}
        )
        .whenNotMatchedInsert(values={f.name: f"n.{f.name}" for f in AGG_RESULTS.schema.fields})
        .execute()
    )
    summary = RepairSummary(
        source,
        jid,
        True,
        "Γ rule" if due else "forced",
        n_late,
        span,
        n_windows,
        changed,
        added,
        rows_read,
        affected_rows,
        time.monotonic() - t0,
    )
    row = [
        (
            source,
            jid,
            upto,
            "gamma" if due else "forced",
            n_late,
            span,
            n_windows,
            changed,
            added,
            rows_read,
            affected_rows,
            summary.seconds,
            now_us,
        )
    ]
    delta.merge_new(
        spark.createDataFrame(row, AGG_REPAIRS.schema), AGG_REPAIRS, lake, ("source", "job", "repair_id")
    )
    return summary


# --- validation -----------------------------------------------------------------------------------


def window_quality(spark: SparkSession, settings: Settings, source: str, job: AggJob) -> pd.DataFrame:
    """Every closed window: the stream's and the current value against the exact one over bronze.

    A window is judged once the stream's frontier has passed it. Columns: wid, exact, n, stream_value,
    value, version, produced_by, pending (late tuples not yet repaired), stream_error, met_at_emission,
    exact_now.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import AGG_RESULTS, AGG_STATE, BRONZE

    jid = job_id(job)
    lake = settings.lake_root
    state = (
        delta.read(spark, AGG_STATE, lake)
        .where(where_job(source, jid))
        .orderBy(F.col("as_of_us").desc())
        .first()
    )
    if state is None or state["frontier"] is None:
        msg = f"the aggregate job {jid} has not processed {source} yet: run aggregate-stream first"
        raise InputError(msg)
    horizon, frontier = int(state["as_of_us"]), int(state["frontier"])
    w = job.query().windows
    tuples = _tuples(
        delta.read_arrivals(spark, BRONZE, lake, source=source).where(F.col("arrival_ts") < F.lit(horizon)),
        job,
    )
    exact = exact_windows(tuples, job).where(
        F.col("wid") * F.lit(w.slide_us) + F.lit(w.size_us) <= F.lit(frontier)
    )
    results = delta.read(spark, AGG_RESULTS, lake).where(where_job(source, jid))
    pending = (
        pending_ledger(spark, settings, source, job)
        .groupBy(F.col("window_id").alias("wid"))
        .agg(F.count("*").alias("pending"))
    )
    ranked = exact.select("wid", F.col("value").alias("exact"), F.col("n_rcv").alias("n"))
    frame = (
        ranked.join(
            results.select(
                F.col("window_id").alias("wid"), "stream_value", "value", "version", "produced_by"
            ),
            "wid",
            "left",
        )
        .join(pending, "wid", "left")
        .toPandas()
        .sort_values("wid")
        .reset_index(drop=True)
    )
    frame["pending"] = frame["pending"].fillna(0).astype("int64")
    frame["stream_error"] = _errors(spark, tuples, job, frame)
    frame["met_at_emission"] = frame["stream_error"] < job.eps
    same = np.isclose(frame["value"].to_numpy(float), frame["exact"].to_numpy(float), rtol=1e-9, atol=1e-12)
    frame["exact_now"] = same
    return frame


def _errors(spark: SparkSession, tuples: DataFrame, job: AggJob, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
    """The stream value's error per window (relative; rank error for quantiles; inf if never emitted)."""
    from pyspark.sql import functions as F

    from outoforder.core.windows.aggregate import parse_aggregate

    kind, q = parse_aggregate(job.aggregate)
    emitted = frame["stream_value"].to_numpy(dtype=float)
    if kind != "quantile":
        err = relative_error(emitted, frame["exact"].to_numpy(dtype=float))
        return np.where(np.isnan(emitted), np.inf, err)
    sv = spark.createDataFrame(frame[["wid", "stream_value"]].dropna(), "wid long, stream_value double")
    ranks = (
        window_members(tuples, job)
        .join(F.broadcast(sv), "wid")
        .groupBy("wid")
        .agg(
            F.sum((F.col("v") < F.col("stream_value")).cast("long")).alias("below"),
            F.sum((F.col("v") <= F.col("stream_value")).cast("long")).alias("at"),
        )
        .toPandas()
    )
    merged = frame[["wid", "n"]].merge(ranks, on="wid", how="left")
    err = rank_error(
        q, merged["below"].fillna(0).to_numpy(), merged["at"].fillna(0).to_numpy(), merged["n"].to_numpy()
    )
    return np.where(np.isnan(emitted), np.inf, err)


@retry_on_conflict
def validate(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: AggJob,
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[Any]:
    """GX: windows unique; (ε, δ) at emission; windows without pending late tuples exact; no gaps.

    ``fail`` None follows ``quality.on_violation``.
    """
    import pandas as pd

    from outoforder.io import delta
    from outoforder.io.tables import AGG_RESULTS
    from outoforder.quality.checkpoints import conclude, run_checkpoint
    from outoforder.quality.measures import record_measures

    jid = job_id(job)
    frame = window_quality(spark, settings, source, job)
    results = delta.read(spark, AGG_RESULTS, settings.lake_root).where(where_job(source, jid))
    settled = frame[frame["pending"] == 0]
    judged = spark.createDataFrame(
        pd.DataFrame(
            {
                "wid": frame["wid"].astype("int64"),
                "met_at_emission": frame["met_at_emission"].astype(bool),
                "present_if_settled": (frame["value"].notna() | (frame["pending"] > 0)).astype(bool),
                "exact_if_settled": np.where(frame["pending"] == 0, frame["exact_now"], True).astype(bool),
            }
        )
    )
    met_share = float(frame["met_at_emission"].mean()) if len(frame) else 1.0
    wids = frame["wid"].to_numpy(dtype="int64")
    starts = wids * job.slide_us  # window i covers [i·slide, i·slide + size)
    errors = frame["stream_error"].to_numpy(dtype=float)
    record_measures(
        spark, settings, source, jid, "agg_error",
        [
            (int(w), int(s), int(s) + job.size_us, None if not np.isfinite(e) else float(e), float(job.eps),
             bool(m))
            for w, s, e, m in zip(wids, starts, errors, frame["met_at_emission"], strict=True)
        ],
    )  # fmt: skip
    suites = run_checkpoint(
        settings, "aggregate", {"agg_results": results, "agg_quality": judged},
        source=source, job=jid, run_name=run_name, delta=job.delta,
    )  # fmt: skip
    print(
        f"[validate-aggregate] {source} ({jid}): {len(frame):,} closed windows; "
        f"{met_share:.2%} met ε = {job.eps} at emission (target >= {1 - job.delta:.0%}); "
        f"{len(settled):,} without pending late tuples, "
        f"{int(settled['exact_now'].sum()):,} of them exact; {int(frame['value'].isna().sum()):,} missing",
        flush=True,
    )
    conclude(suites, "aggregates", settings.quality.fails(fail))
    return suites
