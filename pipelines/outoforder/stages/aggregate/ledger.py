"""The late-tuple ledger of the aggregates: what is pending since the last repair, and HPM's Γ rule over it.

Every late membership (a tuple that arrived after a window it belongs to was emitted) is a
``late`` row of ``silver/agg_ledger`` with the tuple's arrival time; a repair records the arrival
time it repaired the ledger up to in ``gold/agg_repairs``, so the *pending* ledger is the late rows
that arrived since. After every pass the stream stage leaves the ledger's status in a small JSON
file (:func:`status_path`) that the ``aggregate_stream`` DAG reads without Spark to decide whether
to start ``late_repair``. Both it and the repair read the pending ledger on the driver (delta-rs,
no Spark job).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from outoforder.config import Settings
from outoforder.core.windows.repair import gamma_due
from outoforder.io import status as status_files
from outoforder.stages.aggregate.spec import AggJob

if TYPE_CHECKING:
    import pyarrow as pa

    from outoforder.stages.context import StageContext

NEVER = -(2**62)  # "repaired up to": before any repair


def repaired_upto(settings: Settings, source: str, job: AggJob) -> int:
    """The arrival time the job's newest repair covered the ledger up to (:data:`NEVER` before one)."""
    import pyarrow.compute as pc

    from outoforder.io import deltars
    from outoforder.io.tables import AGG_REPAIRS

    done = deltars.read_table(
        AGG_REPAIRS,
        settings.lake_root,
        settings.storage,
        [("source", "=", source), ("job", "=", job.job_id())],
        columns=["repair_id"],
    )
    if done is None or done.num_rows == 0:
        return NEVER
    return int(pc.max(done.column("repair_id")).as_py())


def pending_rows(settings: Settings, source: str, job: AggJob) -> pa.Table | None:
    """The late rows that arrived since the last repair (seq, ts, arrival_us, window_id), on the driver.

    None when there are none. Read with delta-rs: no Spark job (the ledger's late rows since a
    repair are a few per late tuple).
    """
    from outoforder.io import deltars
    from outoforder.io.tables import AGG_LEDGER

    upto = repaired_upto(settings, source, job)
    rows = deltars.read_table(
        AGG_LEDGER,
        settings.lake_root,
        settings.storage,
        [
            ("source", "=", source),
            ("job", "=", job.job_id()),
            ("kind", "=", "late"),
            ("arrival_us", ">=", upto),
        ],
        columns=["seq", "ts", "arrival_us", "window_id"],
    )
    return None if rows is None or rows.num_rows == 0 else rows


@dataclass(frozen=True)
class Pending:
    """The pending ledger in figures: late tuples, their event-time range, up to when, windows.

    ``upto_us`` is just after the newest pending late tuple's arrival: a repair covers the ledger
    (and bronze) before it.
    """

    late_tuples: int
    lo_ts: int
    hi_ts: int
    upto_us: int
    windows: int

    @property
    def span_us(self) -> int:
        """The event time the pending late tuples span."""
        return self.hi_ts - self.lo_ts

    def due(self, gamma_us: int) -> bool:
        """HPM's Γ rule on the pending tuples' event times."""
        return gamma_due(np.array([self.lo_ts, self.hi_ts], dtype=np.int64), gamma_us)


def summarize(rows: pa.Table | None) -> Pending | None:
    """The pending ledger's rows (:func:`pending_rows`) in figures (None when there are none)."""
    import pyarrow.compute as pc

    if rows is None or rows.num_rows == 0:
        return None
    return Pending(
        len(pc.unique(rows.column("seq"))),
        int(pc.min(rows.column("ts")).as_py()),
        int(pc.max(rows.column("ts")).as_py()),
        int(pc.max(rows.column("arrival_us")).as_py()) + 1,
        len(pc.unique(rows.column("window_id"))),
    )


def pending_on_driver(settings: Settings, source: str, job: AggJob) -> Pending | None:
    """The pending ledger in figures, read on the driver (no Spark job)."""
    return summarize(pending_rows(settings, source, job))


def status_path(settings: Settings, source: str, job: AggJob) -> Path:
    """Where the stream stage leaves the ledger's Γ status for the scheduler (a small JSON file)."""
    return status_files.status_path(settings, "aggregate", source, job.job_id())


def status_of(source: str, job: AggJob, pending: Pending | None) -> dict[str, Any]:
    """The status of a pending ledger summarized as ``pending`` (None: empty)."""
    n, span = (0, 0) if pending is None else (pending.late_tuples, pending.span_us)
    return {
        "source": source,
        "job": job.job_id(),
        "pending_late_tuples": n,
        "pending_span_us": span,
        "gamma_us": job.gamma_us,
        "repair_due": pending is not None and pending.due(job.gamma_us),
    }


def ledger_status(ctx: StageContext) -> dict[str, Any]:
    """The pending ledger's size and event-time span, and whether the Γ rule calls for a repair."""
    source, job = ctx.bronze_source, ctx.job_of(AggJob)
    return status_of(source, job, pending_on_driver(ctx.settings, source, job))


def write_ledger_status(ctx: StageContext, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``status`` (default: :func:`ledger_status`, computed) to :func:`status_path` (atomically)."""
    settings, source, job = ctx.settings, ctx.bronze_source, ctx.job_of(AggJob)
    status = status if status is not None else ledger_status(ctx)
    status_files.write_status(status_path(settings, source, job), status)
    return status


def read_status(settings: Settings, source: str, job: AggJob) -> dict[str, Any] | None:
    """The status the stream stage left (None before its first interval); no Spark needed."""
    found: dict[str, Any] | None = status_files.read_status(status_path(settings, source, job))
    return found
