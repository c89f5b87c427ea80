"""What every per-interval stream stage shares: where a job resumes, what is left, old snapshots.

A stream stage (the join, the aggregates) processes the bronze arrivals of one arrival-time
interval ``[start, end)`` per run and keeps its operator state as snapshots *as of* an interval end
in a state table keyed by (source, job, as_of_us). These helpers find the snapshot to resume from
(failing clearly when a run would skip arrivals), the end of the newest processed interval, the
span of arrivals still to process, and remove snapshots a re-run can no longer need.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import InputError, StateError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from outoforder.io.tables import Table


def where_job(source: str, job: str) -> Any:
    """The filter on (source, job) of a stage's tables."""
    from pyspark.sql import functions as F

    return (F.col("source") == source) & (F.col("job") == job)


def snapshot_before(
    spark: SparkSession,
    settings: Settings,
    state_table: Table,
    source: str,
    job: str,
    start_us: int,
    has_arrivals: Callable[[int, int], bool],
    what: str,
) -> dict[str, Any] | None:
    """The state row to resume from at ``start_us`` (None = the job's first interval).

    ``has_arrivals(lo, hi)`` says whether the job has input in ``[lo, hi)``: a run may start after
    the newest snapshot only if nothing arrived in between.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta

    delta.ensure(spark, state_table, settings.lake_root)
    states = delta.read(spark, state_table, settings.lake_root).where(where_job(source, job))
    row = states.where(F.col("as_of_us") <= start_us).orderBy(F.col("as_of_us").desc()).first()
    if row is None:
        later = states.agg(F.min("interval_start_us")).first()
        if later is not None and later[0] is not None and later[0] < start_us:
            msg = (
                f"no {what} state of {source} ({job}) at or before {start_us}: its snapshots were "
                "removed (keep_snapshots); re-running this far back needs a restart of the job"
            )
            raise StateError(msg)
        if later is not None and later[0] is not None and later[0] > start_us:
            msg = f"the {what} of {source} ({job}) starts at {later[0]}; [{start_us}, ...) lies before it"
            raise StateError(msg)
        return None
    state = row.asDict()
    if state["as_of_us"] < start_us and has_arrivals(state["as_of_us"], start_us):
        msg = (
            f"the {what} of {source} ({job}) has processed arrivals up to {state['as_of_us']}; "
            f"run [{state['as_of_us']}, {start_us}) first (intervals depend on the previous one)"
        )
        raise StateError(msg)
    return state


def last_processed(
    spark: SparkSession, settings: Settings, state_table: Table, source: str, job: str
) -> int | None:
    """The end of the newest interval the job has processed (None before its first run)."""
    from pyspark.sql import functions as F

    from outoforder.io import delta

    delta.ensure(spark, state_table, settings.lake_root)
    done = (
        delta.read(spark, state_table, settings.lake_root)
        .where(where_job(source, job))
        .agg(F.max("as_of_us"))
        .first()
    )
    return None if done is None or done[0] is None else int(done[0])


def pending_span(
    spark: SparkSession, settings: Settings, source: str, done: int | None
) -> tuple[int, int] | None:
    """The arrivals still to process: [resume point, newest arrival + 1), or None when there are none.

    The resume point is ``done`` (where the job stopped), or the source's first arrival.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    span = (
        delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source)
        .agg(F.min("arrival_ts"), F.max("arrival_ts"))
        .first()
    )
    if span is None or span[0] is None:
        msg = f"bronze has no arrivals with an arrival_ts for source {source!r}"
        raise InputError(msg)
    start = int(span[0]) if done is None else done
    end = int(span[1]) + 1
    return (start, end) if start < end else None


def prune_snapshots(
    spark: SparkSession,
    settings: Settings,
    state_table: Table,
    snapshot_tables: Sequence[Table],
    source: str,
    job: str,
    keep: int,
) -> None:
    """Delete all but the newest ``keep`` snapshots (bounded history: what a re-run may still need)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from outoforder.io import delta

    kept = (
        delta.read(spark, state_table, settings.lake_root)
        .where(where_job(source, job))
        .select("as_of_us")
        .orderBy(F.col("as_of_us").desc())
        .limit(keep)
        .agg(F.min("as_of_us"))
        .first()
    )
    if kept is None or kept[0] is None:
        return
    cond = f"source = '{source}' AND job = '{job}' AND as_of_us < {int(kept[0])}"
    # a Delta DELETE scans and commits even when nothing matches: look first (one cheap read)
    if delta.read(spark, state_table, settings.lake_root).where(cond).limit(1).count():
        for t in (*snapshot_tables, state_table):
            DeltaTable.forPath(spark, t.path(settings.lake_root)).delete(cond)


def check_state_budget(settings: Settings, what: str, source: str, job: str, end_us: int, rows: int) -> None:
    """Fail before a state of more than ``stream.state_budget_rows`` rows is written as of ``end_us``.

    The interval's results may already be merged; they are keyed, so the rerun after the budget is
    raised (or the job narrowed) inserts nothing twice and continues from the unchanged old state.

    >>> from outoforder.config import load_settings
    >>> check_state_budget(load_settings(env={"OOO_STATE_BUDGET_ROWS": "10"}), "top-k", "s", "j", 5, 10)
    >>> check_state_budget(load_settings(env={"OOO_STATE_BUDGET_ROWS": "10"}), "top-k", "s", "j", 5, 11)
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    outoforder.errors.StateError: the top-k state of s (j) as of 5 would hold 11 rows, over ... = 10 ...
    """
    budget = settings.stream.state_budget_rows
    if rows > budget:
        msg = (
            f"the {what} state of {source} ({job}) as of {end_us} would hold {rows:,} rows, over "
            f"stream.state_budget_rows = {budget:,} (OOO_STATE_BUDGET_ROWS); its state was not written: "
            "raise the budget or narrow the job, then rerun from this interval"
        )
        raise StateError(msg)
