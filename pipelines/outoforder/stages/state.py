"""The operator state's tables: where a job stopped, its snapshots, and what it may run next.

A stream stage keeps its state as snapshots *as of* an interval end (one row in a state table keyed
by (source, job, as_of_us), larger state in snapshot tables with the same key):
:mod:`outoforder.stages.interval` writes them; this module reads them: the point an interval
resumes from (:func:`resume_point`), the state as of a time (:func:`state_at`), what a job has
processed (:func:`last_processed`, :func:`pending_span`), the checks that judge only what closed
(:func:`check_states`, :func:`nothing_judged`), and the housekeeping (:func:`prune_snapshots`,
:func:`check_state_budget`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import InputError, NothingToJudge, StateError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)


def where_job(source: str, job: str) -> Column:
    """The filter on (source, job) of a stage's tables."""
    from pyspark.sql import functions as F

    return (F.col("source") == source) & (F.col("job") == job)


@dataclass(frozen=True)
class Resume:
    """Where an interval starts from.

    The state row (None: the job's first interval), the snapshot tables' rows when they are at
    hand (else they are read), and the ends of the snapshots kept so far.
    """

    state: Mapping[str, Any] | None
    snapshots: Mapping[str, DataFrame]
    kept: list[int]


def resume_point(
    spark: SparkSession,
    settings: Settings,
    state_table: Table,
    source: str,
    job: str,
    start_us: int,
    has_arrivals: Callable[[int, int], bool],
    what: str,
) -> Resume:
    """The state row to resume from at ``start_us`` and the ends of every snapshot; the table exists.

    ``has_arrivals(lo, hi)`` says whether the job has input in ``[lo, hi)``: a run may start after
    the newest snapshot only if nothing arrived in between.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.spark.rows import one_row

    states = delta.read(spark, state_table, settings.lake_root).where(where_job(source, job))
    # one query: every snapshot's bounds (one row per kept snapshot), and the whole newest row as
    # of start_us (max_by skips the rows after it, whose ordering is null)
    found = one_row(
        states.agg(
            F.collect_list(F.struct("as_of_us", "interval_start_us")).alias("ends"),
            F.max_by(
                F.struct(*states.columns), F.when(F.col("as_of_us") <= start_us, F.col("as_of_us"))
            ).alias("newest"),
        )
    )
    ends = found["ends"]
    kept = sorted(int(r["as_of_us"]) for r in ends)
    usable = [t for t in kept if t <= start_us]
    if not usable:
        first = min((int(r["interval_start_us"]) for r in ends), default=None)
        if first is not None and first < start_us:
            msg = (
                f"no {what} state of {source} ({job}) at or before {start_us}: its snapshots were "
                "removed (keep_snapshots); re-running this far back needs a restart of the job"
            )
            raise StateError(msg)
        if first is not None and first > start_us:
            msg = f"the {what} of {source} ({job}) starts at {first}; [{start_us}, ...) lies before it"
            raise StateError(msg)
        return Resume(None, {}, kept)
    as_of = usable[-1]
    if as_of < start_us and has_arrivals(as_of, start_us):
        msg = (
            f"the {what} of {source} ({job}) has processed arrivals up to {as_of}; "
            f"run [{as_of}, {start_us}) first (intervals depend on the previous one)"
        )
        raise StateError(msg)
    row = found["newest"]
    if row is None or int(row["as_of_us"]) != as_of:  # a broken invariant: both come from one read
        msg = f"the {what} state of {source} ({job}) as of {as_of} was not read whole while resuming"
        raise StateError(msg)
    return Resume(row.asDict(), {}, kept)


def job_extent(
    spark: SparkSession, settings: Settings, state_table: Table, source: str, job: str
) -> tuple[int | None, int | None]:
    """(:func:`last_processed`, :func:`first_start`) in one query."""
    from pyspark.sql import functions as F

    from outoforder.io import delta

    delta.ensure(spark, state_table, settings.lake_root)
    row = (
        delta.read(spark, state_table, settings.lake_root)
        .where(where_job(source, job))
        .agg(F.max("as_of_us"), F.min("interval_start_us"))
        .first()
    )
    last, first = (None, None) if row is None else (row[0], row[1])
    return (None if last is None else int(last)), (None if first is None else int(first))


def state_at(
    spark: SparkSession, settings: Settings, state_table: Table, source: str, job: str, at_us: int
) -> dict[str, Any] | None:
    """The job's newest state row as of ``at_us`` or earlier (None if there is none)."""
    return states_at(spark, settings, state_table, source, job, [at_us])[0]


def states_at(
    spark: SparkSession,
    settings: Settings,
    state_table: Table,
    source: str,
    job: str,
    instants: Sequence[int],
) -> list[dict[str, Any] | None]:
    """:func:`state_at` for each of ``instants``, in one query.

    A check asks for two: where it judges up to, and where the previous check stopped.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.spark.rows import one_row

    delta.ensure(spark, state_table, settings.lake_root)
    if not instants:
        return []
    states = delta.read(spark, state_table, settings.lake_root)
    row = F.struct(*states.columns)
    newest = one_row(
        states.where(where_job(source, job) & (F.col("as_of_us") <= F.lit(max(instants)))).agg(
            *(
                # max_by skips the rows whose ordering is null: those after the instant
                F.max_by(row, F.when(F.col("as_of_us") <= F.lit(at), F.col("as_of_us"))).alias(f"s{i}")
                for i, at in enumerate(instants)
            )
        )
    )
    return [None if newest[f"s{i}"] is None else newest[f"s{i}"].asDict() for i in range(len(instants))]


def check_states(
    spark: SparkSession,
    settings: Settings,
    state_table: Table,
    source: str,
    job: str,
    until_us: int | None,
    since_us: int | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What a check over ``[since_us, until_us)`` judges from, in one query (:func:`states_at`).

    The state in force at ``until_us`` (the newest when None) and the one at ``since_us`` (None
    when not given: the check judges from the start).
    """
    instants = [until_us if until_us is not None else 2**62] + ([] if since_us is None else [since_us])
    now, *before = states_at(spark, settings, state_table, source, job, instants)
    return now, before[0] if before else None


def last_processed(
    spark: SparkSession, settings: Settings, state_table: Table, source: str, job: str
) -> int | None:
    """The end of the newest interval the job has processed (None before its first run)."""
    return job_extent(spark, settings, state_table, source, job)[0]


def first_start(
    spark: SparkSession, settings: Settings, state_table: Table, source: str, job: str
) -> int | None:
    """The start of the job's first interval (None before its first run)."""
    return job_extent(spark, settings, state_table, source, job)[1]


def check_input(
    spark: SparkSession, settings: Settings, source: str, roles: Mapping[str, Sequence[str]], what: str
) -> None:
    """Fail, naming what bronze has, when it holds no row of ``source`` or none of a role's streams.

    ``roles``: the job's streams by role (R and S of a join); an empty role means every stream. A
    named stream that is absent while others of its role are present is only warned about (on a
    live stream it may not have sent yet).
    """
    from difflib import get_close_matches

    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    def hint(name: str, known: Sequence[str]) -> str:
        near = get_close_matches(name, known, n=1)
        return f"; did you mean {near[0]!r}?" if near else ""

    def listed(names: Sequence[str]) -> str:
        return ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") or "none"

    bronze = (
        delta.read(spark, BRONZE, settings.lake_root)
        if delta.exists(spark, BRONZE, settings.lake_root)
        else None
    )
    present = (
        [r[0] for r in bronze.where(F.col("source") == source).select("stream").distinct().collect()]
        if bronze is not None
        else []
    )
    if not present:
        sources = (
            sorted(r[0] for r in bronze.select("source").distinct().collect()) if bronze is not None else []
        )
        msg = (
            f"the {what} has no input: bronze has no rows of source {source!r} (its sources: "
            f"{listed(sources)}{hint(source, sources)})"
        )
        raise InputError(msg)
    present = sorted(present)
    for role, wanted in roles.items():
        absent = [s for s in wanted if s not in present]
        if not absent:
            continue
        shown = ", ".join(map(repr, absent))
        if len(absent) == len(wanted):
            msg = (
                f"the {what} has no input: source {source!r} has no rows of {role} = {shown} (its streams: "
                f"{listed(present)}{hint(absent[0], present)})"
            )
            raise InputError(msg)
        log.warning(
            "the %s's %s names %s, which source %r has no rows of yet (its streams: %s%s)",
            what, role, shown, source, listed(present), hint(absent[0], present),
        )  # fmt: skip


def nothing_judged(
    spark: SparkSession, settings: Settings, state_table: Table, source: str, job: str, check: str, what: str
) -> NothingToJudge:
    """The error of a check that found nothing to judge: what it looked for, and what the lake has.

    A check that judged nothing has not passed: a misspelt source, or options that make another
    job id than the stream stage's, would otherwise be a green report on no data.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta

    jobs = (
        delta.read(spark, state_table, settings.lake_root)
        .groupBy("source", "job")
        .agg(F.max("as_of_us").alias("upto"))
        .orderBy("source", "job")
        .collect()
        if delta.exists(spark, state_table, settings.lake_root)
        else []
    )
    mine = next((int(r["upto"]) for r in jobs if (r["source"], r["job"]) == (source, job)), None)
    if mine is not None:
        return NothingToJudge(
            f"{check}: nothing to judge: job {job} has processed {source!r} up to {mine} µs and no "
            f"{what} closed in the range asked for: run the stream further, or check a later --until"
        )
    known = "; ".join(f"{r['job']} on {r['source']!r} up to {r['upto']} µs" for r in jobs[:10]) or "none"
    return NothingToJudge(
        f"{check}: nothing to judge: job {job} has not processed source {source!r} (jobs on this lake: "
        f"{known}); check --source, and pass the stream stage's options (they make the job's id)"
    )


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
        msg = (
            f"bronze has no arrivals with an arrival_ts for source {source!r}: the stream stages cut "
            "intervals by arrival time (a declared source gets one from its `arrival` field, "
            "docs/sources.md)"
        )
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
    oldest_kept: int,
) -> None:
    """Delete the snapshots older than ``oldest_kept`` (bounded history: what a re-run may still need)."""
    from outoforder.io import delta

    match: dict[str, str | int] = {"source": source, "job": job}
    below = ("as_of_us", oldest_kept)
    # the snapshot tables first and the state table last: a run killed in between leaves state
    # rows behind, and the next prune deletes the rest
    for t in (*snapshot_tables, state_table):
        delta.delete_where(spark, t, settings.lake_root, match, below, look_first=False)


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
