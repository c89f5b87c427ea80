"""``aggregate-repair``: HPM's batch module, which makes the aggregates exact once late tuples are in bronze.

It looks at the *pending* ledger (:mod:`outoforder.stages.aggregate.ledger`). When the late
tuples' event times span more than Γ (or when forced), it recomputes every affected window
exactly from bronze (the arrivals up to the newest pending late tuple), reading only the event-time
ranges of those windows, and MERGEs: a changed value gets version + 1, ``final``, the previous
value and the late tuples that caused it; an unchanged one only becomes ``final``; a window the
stream never emitted (all its tuples were late) is inserted. The repair is recorded in
``gold/agg_repairs`` last: a rerun after a crash recomputes the same values and changes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from outoforder.core.windows.repair import window_runs
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import AGG_REPAIRS, AGG_RESULTS, BRONZE
from outoforder.stages.aggregate.inputs import agg_tuples
from outoforder.stages.aggregate.ledger import Pending, pending_ledger, summarize
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.context import StageContext
from outoforder.stages.state import where_job

if TYPE_CHECKING:
    from pyspark.sql import Column

log = logging.getLogger(__name__)

# the columns a repair rewrites in a window whose value changed
CHANGED_COLUMNS = (
    "value", "n_tuples", "version", "final", "produced_by", "previous_value", "caused_by",
    "written_by_us", "written_at_us",
)  # fmt: skip


@dataclass(frozen=True)
class RepairSummary:
    """What one repair check did (``ran`` is False when nothing was pending or Γ was not met).

    ``left`` is the pending ledger after the call: what stays pending when Γ was not met, None
    when nothing was pending or the repair ran.
    """

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
    left: Pending | None = field(default=None, compare=False)

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


@retry_on_conflict
def repair(ctx: StageContext, force: bool = False) -> RepairSummary:
    """Run one repair if the Γ rule (or ``force``) calls for it; idempotent."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(AggJob)
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.spark.rows import one_row
    from outoforder.spark.windows import exact_windows, window_members

    t0 = time.monotonic()
    jid = job.job_id()
    lake = settings.lake_root
    delta.ensure(spark, AGG_RESULTS, lake)
    pending = pending_ledger(ctx).localCheckpoint()
    todo = summarize(pending)
    if todo is None:
        return RepairSummary(source, jid, False, "the ledger has no pending late tuples")
    n_late, span, upto, n_windows = todo.late_tuples, todo.span_us, todo.upto_us, todo.windows
    due = todo.due(job.gamma_us)
    if not due and not force:
        why = f"{n_late} pending late tuples span {span / 1e6:.2f} s <= Γ = {job.gamma_us / 1e6:g} s"
        return RepairSummary(source, jid, False, why, n_late, span, n_windows, left=todo)
    w = job.query().windows
    targets = pending.select(F.col("window_id").alias("wid")).distinct()
    ids = np.array([int(r[0]) for r in targets.collect()], dtype=np.int64)
    in_windows = F.lit(False)
    for lo, hi in window_runs(ids, w):
        in_windows = in_windows | ((F.col("event_ts") >= F.lit(lo)) & (F.col("event_ts") < F.lit(hi)))
    bronze = delta.read_arrivals(spark, BRONZE, lake, source=source)
    read = agg_tuples(bronze.where((F.col("arrival_ts") < F.lit(upto)) & in_windows), job).localCheckpoint()
    rows_read = read.count()
    exact = exact_windows(read, w, job.aggregate, targets).localCheckpoint()
    # rows of bronze that belong to an affected window (what an ideal repair would read)
    affected_rows = window_members(read, w).join(F.broadcast(targets), "wid").select("seq").distinct().count()
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
    counted = one_row(
        joined.agg(
            F.count(F.when(F.col("before").isNotNull() & ~same_as("before"), 1)).alias("changed"),
            F.count(F.when(F.col("before").isNull(), 1)).alias("added"),
        )
    )
    changed, added = int(counted["changed"]), int(counted["added"])
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
    delta.upsert(
        updates,
        AGG_RESULTS,
        lake,
        keys=("source", "job", "window_id"),
        match={"source": source, "job": jid},
        updates=[("NOT n.same", CHANGED_COLUMNS), ("n.same AND NOT t.final", ("final", "written_at_us"))],
    )
    summary = RepairSummary(
        source, jid, True, "Γ rule" if due else "forced", n_late, span, n_windows, changed, added, rows_read,
        affected_rows, time.monotonic() - t0,
    )  # fmt: skip
    row = (
        source, jid, upto, "gamma" if due else "forced", n_late, span, n_windows, changed, added, rows_read,
        affected_rows, summary.seconds, now_us, int(ids.min()), int(ids.max()),
    )  # fmt: skip
    # recorded last (see the module docstring); a rerun that got this far finds it and stops early
    delta.replace_rows(
        spark, AGG_REPAIRS, lake, settings.storage, [row], {"source": source, "job": jid},
        ("repair_id", upto, upto + 1),
    )  # fmt: skip
    return summary
