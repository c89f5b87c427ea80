"""``aggregate-repair``: HPM's batch module, which makes the aggregates exact once late tuples are in bronze.

It looks at the *pending* ledger (:mod:`outoforder.stages.aggregate.ledger`). When the late
tuples' event times span more than Γ (or when forced), it recomputes every affected window
exactly from bronze (the arrivals up to the newest pending late tuple), reading only the event-time
ranges of those windows, and rewrites those windows' rows in one commit: a changed value gets
version + 1, ``final``, the previous value and the late tuples that caused it; an unchanged one
only becomes ``final``; a window the stream never emitted (all its tuples were late) is inserted.
The repair is recorded in ``gold/agg_repairs`` last: a rerun after a crash recomputes the same
values and changes nothing.
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
from outoforder.stages.aggregate.ledger import Pending, pending_rows, summarize
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.context import StageContext

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


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
    """Run one repair if the Γ rule (or ``force``) calls for it; idempotent.

    One scan of bronze in Spark (the affected windows' exact values, the rows read counted by an
    observation on it); the pending ledger and the affected windows' stored results are read, and
    the results and the repair's row written, on the driver (delta-rs): a row per window.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(AggJob)
    import pyarrow.compute as pc
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from outoforder.io import delta, deltars
    from outoforder.spark.judge import exact_windows

    t0 = time.monotonic()
    jid = job.job_id()
    lake, storage = settings.lake_root, settings.storage
    pending = pending_rows(settings, source, job)
    todo = summarize(pending)
    if pending is None or todo is None:
        return RepairSummary(source, jid, False, "the ledger has no pending late tuples")
    n_late, span, upto, n_windows = todo.late_tuples, todo.span_us, todo.upto_us, todo.windows
    due = todo.due(job.gamma_us)
    if not due and not force:
        why = f"{n_late} pending late tuples span {span / 1e6:.2f} s <= Γ = {job.gamma_us / 1e6:g} s"
        return RepairSummary(source, jid, False, why, n_late, span, n_windows, left=todo)
    w = job.query().windows
    ids = np.unique(pc.cast(pending.column("window_id"), "int64").to_numpy())
    in_windows = F.lit(False)
    for lo, hi in window_runs(ids, w):
        in_windows = in_windows | ((F.col("event_ts") >= F.lit(lo)) & (F.col("event_ts") < F.lit(hi)))
    bronze = delta.read_arrivals(spark, BRONZE, lake, source=source)
    # counted as the exact values are computed (an observation: no job of its own); every row
    # read lies in an affected window (the ranges are the windows' union), so what an ideal
    # repair reads is what this one reads
    seen = Observation("repair_read")
    read = agg_tuples(bronze.where((F.col("arrival_ts") < F.lit(upto)) & in_windows), job).observe(
        seen, F.count(F.lit(1)).alias("rows")
    )
    first, last = int(ids.min()), int(ids.max())
    exact = exact_windows(read, w, job.aggregate, (first, last)).select("wid", "exact", "n").toPandas()
    exact = exact[exact["wid"].isin(ids)].rename(columns={"exact": "value", "n": "n_rcv"})
    rows_read = int(seen.get["rows"])
    slice_ = ("window_id", first, last + 1)
    stored = deltars.read_table(
        AGG_RESULTS, lake, storage,
        [("source", "=", source), ("job", "=", jid), ("window_id", ">=", first), ("window_id", "<=", last)],
    )  # fmt: skip
    names = AGG_RESULTS.schema.fieldNames()
    current = {} if stored is None else {int(r["window_id"]): r for r in stored.to_pylist()}
    causes = _causes(pending)
    now_us = time.time_ns() // 1000
    changed = added = 0
    for wid, value, n_rcv in zip(exact["wid"], exact["value"], exact["n_rcv"], strict=True):
        wid, value = int(wid), None if value is None or np.isnan(value) else float(value)
        cur = current.get(wid)
        # A run killed between the results' write and the repair's row leaves results this
        # repair already wrote (produced_by "repair", written_by_us = upto): they count against
        # the value they replaced, so the rerun logs what an uninterrupted repair would have.
        mine = cur is not None and cur["produced_by"] == "repair" and cur["written_by_us"] == upto
        before = None if cur is None else (cur["previous_value"] if mine else cur["value"])
        added += before is None
        changed += before is not None and not _same(value, before)
        if cur is not None and _same(value, cur["value"]):
            if not cur["final"]:
                current[wid] = {**cur, "final": True, "written_at_us": now_us}
            continue
        new = {  # what a changed value rewrites; the stream's columns stay
            "value": value, "n_tuples": int(n_rcv), "version": 1 if cur is None else int(cur["version"]) + 1,
            "final": True, "produced_by": "repair", "previous_value": None if cur is None else cur["value"],
            "caused_by": causes.get(wid), "written_by_us": upto, "written_at_us": now_us,
        }  # fmt: skip
        current[wid] = {**cur, **new} if cur is not None else {
            **dict.fromkeys(names), "source": source, "job": jid, "window_id": wid,
            "window_start_us": wid * w.slide_us, "window_end_us": wid * w.slide_us + w.size_us, **new,
        }  # fmt: skip
    rows = [tuple(r[n] for n in names) for _, r in sorted(current.items())]
    deltars.replace_rows(AGG_RESULTS, lake, storage, rows, {"source": source, "job": jid}, slice_)
    summary = RepairSummary(
        source, jid, True, "Γ rule" if due else "forced", n_late, span, n_windows, changed, added, rows_read,
        rows_read, time.monotonic() - t0,
    )  # fmt: skip
    row = (
        source, jid, upto, "gamma" if due else "forced", n_late, span, n_windows, changed, added, rows_read,
        rows_read, summary.seconds, now_us, first, last,
    )  # fmt: skip
    # recorded last (see the module docstring); a rerun that got this far finds it and stops early
    deltars.replace_rows(
        AGG_REPAIRS, lake, storage, [row], {"source": source, "job": jid}, ("repair_id", upto, upto + 1)
    )
    return summary


def _same(value: float | None, other: float | None) -> bool:
    """Equal values, up to the rounding of a sum computed in another order."""
    if value is None or other is None:
        return False
    return abs(value - other) <= 1e-9 * abs(value) + 1e-12


def _causes(pending: pa.Table) -> dict[int, list[int]]:
    """Per window, the arrival sequence numbers of the late tuples behind its repair, ascending."""
    by: dict[int, set[int]] = {}
    wids, seqs = pending.column("window_id").to_pylist(), pending.column("seq").to_pylist()
    for wid, seq in zip(wids, seqs, strict=True):
        by.setdefault(int(wid), set()).add(int(seq))
    return {wid: sorted(seqs) for wid, seqs in by.items()}
