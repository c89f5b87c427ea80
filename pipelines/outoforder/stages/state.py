"""What the stream stages and their checks ask of a source and a job, beside the pass skeleton.

The filter on a job's rows (:func:`where_job`), whether a job's input exists at all
(:func:`check_input`), the arrivals still to process (:func:`pending_span`), the error of a check
that found nothing to judge (:func:`nothing_judged`) and the state budget
(:func:`check_state_budget`). The state itself is read and written by
:mod:`outoforder.stages.passes`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.errors import InputError, NothingToJudge, NothingYet, StateError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)


def where_job(source: str, job: str) -> Column:
    """The filter on (source, job) of a stage's tables."""
    from pyspark.sql import functions as F

    return (F.col("source") == source) & (F.col("job") == job)


def check_input(
    spark: SparkSession,
    settings: Settings,
    source: str,
    roles: Mapping[str, Sequence[str]],
    what: str,
    scheduled: bool = False,
) -> None:
    """Fail, naming what bronze has, when it holds no row of ``source`` or none of a role's streams.

    ``roles``: the job's streams by role (R and S of a join); an empty role means every stream. A
    named stream that is absent while others of its role are present is only warned about (on a
    live stream it may not have sent yet). ``scheduled``: a run the scheduler started, whose stream
    may not have started yet: the same words as :class:`NothingYet` (the task is skipped).
    """
    missing = NothingYet if scheduled else InputError
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
        raise missing(msg)
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
            raise missing(msg)
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
