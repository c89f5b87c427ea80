"""The skeleton every stream stage runs: one arrival-time interval per run, the operator's state in Delta.

A stream stage (the join, the aggregates, the top-k) processes the bronze arrivals of one
arrival-time interval ``[start, end)`` per run and keeps its operator state as snapshots *as of* an
interval end: one row in a state table keyed by (source, job, as_of_us), and for larger state
(buffered tuples, open windows) rows in snapshot tables with the same key. :class:`IntervalStage`
is the template; a stage fills in two hooks, :meth:`~IntervalStage.tuples` (bronze rows to operator
input) and :meth:`~IntervalStage.step` (restore, run the operator, write the results). The
skeleton does the rest, in this order, so that every run is idempotent:

1. **resume**: the snapshot as of ``start`` (:func:`resume_point`). No snapshot means the job's
   first interval; a run that would skip arrivals fails with the interval to run first. Within
   one :meth:`~IntervalStage.run`, the state the previous interval wrote is used as it is, not
   read back;
2. **step**: the operator restores its state, reads the interval's arrivals, and appends its
   results with :meth:`~IntervalStage.append`: one commit per table, tagged with the transaction
   id (source|job, ``end``), so that a rerun of a processed interval writes nothing (Delta skips
   a transaction it has) and no write reads the table's history;
3. **budget**: a state over ``stream.state_budget_rows`` stops the run before it is written;
4. **state**: the snapshot tables, then the state row, as of ``end``, tagged the same way. The
   state goes last: a run killed before it reruns from the old one and finds its results there;
5. **prune**: once more than ``keep_snapshots`` + ``prune_slack`` (:data:`PRUNE_SLACK`) snapshots
   exist, all but the newest ``keep_snapshots`` are deleted (a delete every so many intervals,
   not every one);
6. **summary**: what the interval did, one progress line.

Transaction ids make a rerun free only for an interval that ends at or before the job's newest
snapshot; an interval that starts before it and ends after it would write the earlier part's
results twice, so :meth:`~IntervalStage.run_interval` refuses it (naming the two intervals to run
instead) and :meth:`~IntervalStage.run` splits such a span itself.

:meth:`IntervalStage.run` is the loop the CLI and the main job use: from where the job stopped
(or a given start) to the newest arrival (or a given end), in steps of a given length; over a
long span, only where bronze has arrivals (:mod:`outoforder.stages.spans`).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from outoforder.errors import InputError, SchemaError
from outoforder.io.conflicts import retrying
from outoforder.stages.context import StageContext
from outoforder.stages.spans import interval_steps, scheduled_span
from outoforder.stages.spec import Job
from outoforder.stages.state import (
    Resume,
    check_input,
    check_state_budget,
    job_extent,
    pending_span,
    prune_snapshots,
    resume_point,
    where_job,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)
J = TypeVar("J", bound=Job)
PRUNE_SLACK = 16  # snapshots beyond keep_snapshots before a prune deletes them
APPENDS_AT_ONCE = 4  # an interval's appends committed side by side


@dataclass(frozen=True, kw_only=True)
class IntervalSummary:
    """What one run of a stream stage did; each stage adds its own figures (:meth:`figures`)."""

    stage: ClassVar[str] = "stream"
    source: str
    job: str
    start_us: int
    end_us: int
    arrivals: int
    state_rows: int  # what the stage carries to the next interval (bounded by stream.state_budget_rows)
    seconds: float

    def figures(self) -> str:
        """The stage's own part of the progress line."""
        return ""

    def line(self) -> str:
        """One progress line."""
        figures = self.figures()
        return (
            f"[{self.stage}] {self.source} [{self.start_us}, {self.end_us}): {self.arrivals:,} arrivals"
            f"{', ' + figures if figures else ''}, {self.seconds:.1f} s"
        )


S = TypeVar("S", bound=IntervalSummary)


@dataclass(frozen=True)
class Interval:
    """What a stage's :meth:`~IntervalStage.step` works on."""

    start_us: int
    end_us: int
    now_us: int  # wall clock of the run, for the written_at_us columns
    first_start_us: int  # the start of the job's first interval
    before: Mapping[str, int]  # the cumulative counters as of start (zeros on the first interval)


@dataclass(frozen=True)
class Step:
    """What a stage's step did: its input, its new state, and the figures of its summary."""

    arrivals: int
    state: Mapping[str, Any]  # the operator's own columns of the state row
    state_rows: int  # rows of state carried to the next interval
    snapshots: Mapping[str, DataFrame] = field(default_factory=dict)  # snapshot table name -> rows
    added: Mapping[str, int] = field(default_factory=dict)  # increments of the cumulative counters
    figures: Mapping[str, Any] = field(default_factory=dict)  # the summary's stage-specific fields


class IntervalStage(ABC, Generic[J, S]):
    """A stream stage over arrival-time intervals (see the module docstring for the order of work)."""

    name: ClassVar[str]  # the stage, as the CLI and the progress lines call it
    job_type: ClassVar[type[Job]]  # the job it runs
    what: ClassVar[str]  # what its state is of, in messages ("stream join")
    state_table: ClassVar[Table]
    snapshot_tables: ClassVar[tuple[Table, ...]] = ()  # keyed by as_of_us like the state row
    tables: ClassVar[tuple[Table, ...]] = ()  # created before the first interval (the checks read them)
    counters: ClassVar[tuple[str, ...]] = ("arrivals",)  # cumulative columns of the state row
    summary_type: type[S]

    def __init__(self, ctx: StageContext, keep_snapshots: int = 48, prune_slack: int = PRUNE_SLACK) -> None:
        self.ctx = ctx
        self.spark = ctx.spark
        self.settings = settings = ctx.settings
        self.source = source = ctx.bronze_source
        self.job: J = cast(J, ctx.job_of(self.job_type))
        self.jid = self.job.job_id()
        self.keep_snapshots = keep_snapshots
        self.prune_slack = prune_slack
        self._app = f"{source}|{self.jid}"  # the transaction id's app of every write of this job
        self._carried: Resume | None = None  # what the previous interval of this object wrote
        self._first: int | None = None  # the start of the job's first interval, once read
        self._snapshots: Mapping[str, DataFrame] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future[bool]] = []
        decl = settings.sources.get(source)
        self._kafka = decl is not None and bool(decl.topic)  # intervals must wait for the Kafka ingest

    # --- hooks ------------------------------------------------------------------------------

    @abstractmethod
    def tuples(self, bronze: DataFrame) -> DataFrame:
        """Bronze rows of the job's streams as the operator's input."""

    @abstractmethod
    def step(self, interval: Interval, prev: Mapping[str, Any] | None) -> Step:
        """Restore the state from ``prev`` (None: empty), process the interval, write its results."""

    def finish(self, summary: S) -> None:
        """After the state is written (the aggregates leave their ledger status here)."""

    def before_interval(self, start_us: int) -> None:
        """In :meth:`run`, before each interval (the join adapts its retention here)."""

    def after_interval(self, summary: S) -> None:
        """In :meth:`run`, after each interval (the aggregates may repair here)."""

    # --- reading ----------------------------------------------------------------------------

    def arrivals(self, lo: int, hi: int) -> DataFrame:
        """The operator input of the bronze rows with ``lo <= arrival_ts < hi``."""
        from outoforder.io import delta
        from outoforder.io.tables import BRONZE

        bronze = delta.read_arrivals(
            self.spark, BRONZE, self.settings.lake_root, source=self.source, arrival_ts_range=(lo, hi)
        )
        return self.tuples(bronze)

    def _busy_steps(self, start_us: int, end_us: int, step: int) -> list[int]:
        """The indices of the ``step``-µs steps from ``start_us`` holding a bronze arrival of the source."""
        from pyspark.sql import functions as F

        from outoforder.io import delta
        from outoforder.io.tables import BRONZE

        rows = (
            delta.read_arrivals(
                self.spark,
                BRONZE,
                self.settings.lake_root,
                source=self.source,
                arrival_ts_range=(start_us, end_us),
            )
            .select(F.expr(f"(arrival_ts - {start_us}) div {step}").alias("i"))
            .distinct()
            .collect()
        )
        return [int(r["i"]) for r in rows]

    def streams(self) -> dict[str, tuple[str, ...]]:
        """The job's streams by role (the join's R and S); an empty tuple means every stream."""
        return {"streams": tuple(getattr(self.job, "streams", ()))}

    def mine(self) -> Column:
        """The filter on this job's rows of the stage's tables."""
        return where_job(self.source, self.jid)

    def read(self, table: Table) -> DataFrame:
        """The rows of this job in one of the stage's tables."""
        from outoforder.io import delta

        return delta.read(self.spark, table, self.settings.lake_root).where(self.mine())

    def snapshot(self, table: Table, prev: Mapping[str, Any]) -> DataFrame:
        """The rows of a snapshot table as of the snapshot ``prev`` (the operator's own columns)."""
        from pyspark.sql import functions as F

        carried = self._snapshots.get(table.name)
        if carried is not None:
            return carried
        return self.read(table).where(F.col("as_of_us") == prev["as_of_us"])

    # --- the skeleton -----------------------------------------------------------------------

    def run_interval(self, start_us: int, end_us: int) -> S:
        """Process the arrivals of ``[start_us, end_us)``; idempotent, retried whole on a write conflict.

        A Kafka source's interval must be covered by its ingest (every record appended before
        ``end_us`` in bronze), else the run fails and is retried: a stream stage never runs ahead.
        """
        if self._kafka:
            from outoforder.stages.ingest.kafka_batches import check_covered

            check_covered(self.settings, self.source, end_us)
        return retrying(f"{self.name}.run_interval", lambda: self._run_interval(start_us, end_us))

    def append(self, df: DataFrame, table: Table, interval: Interval) -> Future[bool]:
        """Append an interval's rows to one of the stage's tables, once (see the module docstring).

        The commit runs beside the step's other work (a thread of the stage's own): an interval's
        appends are independent of each other, and each is mostly waiting (Delta's log, a small
        job). The skeleton waits for all of them before it writes the state; the future says
        whether the rows were appended (False: a rerun, committed before).
        """
        from outoforder.io import delta

        lake, storage = self.settings.lake_root, self.settings.storage
        return self._submit(delta.append_once, df, table, lake, self._app, interval.end_us, storage)

    def append_rows(self, rows: Sequence[Sequence[Any]], table: Table, interval: Interval) -> Future[bool]:
        """:meth:`append` for rows the driver holds (a few per window or period of the interval)."""
        from outoforder.io import delta

        lake, storage = self.settings.lake_root, self.settings.storage
        return self._submit(
            delta.append_rows, self.spark, table, lake, storage, rows, self._app, interval.end_us
        )

    def _submit(self, fn: Callable[..., bool], *args: Any) -> Future[bool]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=APPENDS_AT_ONCE, thread_name_prefix=f"{self.name}-append"
            )
        future = self._pool.submit(fn, *args)
        self._pending.append(future)
        return future

    def _settle(self, raising: bool = True) -> None:
        """Wait for the interval's appends; the first failure is raised (all are waited for)."""
        pending, self._pending = self._pending, []
        first: BaseException | None = None
        for f in pending:
            error = f.exception()
            if error is not None and first is None:
                first = error
        if first is not None and raising:
            raise first

    def _resume(self, start_us: int) -> Resume:
        carried = self._carried
        if carried is not None and carried.state is not None and carried.state["as_of_us"] == start_us:
            return Resume(carried.state, carried.snapshots, carried.kept)
        return resume_point(
            self.spark, self.settings, self.state_table, self.source, self.jid, start_us,
            lambda lo, hi: bool(self.arrivals(lo, hi).limit(1).count()), self.what,
        )  # fmt: skip

    def _run_interval(self, start_us: int, end_us: int) -> S:
        from outoforder.io import delta

        if end_us <= start_us:
            msg = f"empty interval [{start_us}, {end_us})"
            raise InputError(msg)
        t0 = time.monotonic()
        lake = self.settings.lake_root
        if self._carried is None:
            for t in (self.state_table, *self.snapshot_tables, *self.tables):
                delta.ensure(self.spark, t, lake)
        resume = self._resume(start_us)
        newest = resume.kept[-1] if resume.kept else None
        if newest is not None and start_us < newest < end_us:
            msg = (
                f"[{start_us}, {end_us}) starts before and ends after the newest processed end {newest} "
                f"of the {self.what} of {self.source} ({self.jid}): run [{start_us}, {newest}) and "
                f"[{newest}, {end_us}) instead"
            )
            raise InputError(msg)
        prev = resume.state
        self._snapshots = resume.snapshots
        before = {c: 0 if prev is None else int(prev[c]) for c in self.counters}
        first = start_us if prev is None else int(prev["interval_start_us"])
        now_us = time.time_ns() // 1000
        try:
            done = self.step(Interval(start_us, end_us, now_us, first, before), prev)
        except BaseException:
            self._settle(raising=False)  # the step's own failure is the one to report
            raise
        self._settle()  # every append of the step committed before the state is written
        check_state_budget(self.settings, self.what, self.source, self.jid, end_us, done.state_rows)
        state = self._write_state(end_us, first, now_us, before, done)
        kept = sorted({*resume.kept, end_us})
        if len(kept) > self.keep_snapshots + self.prune_slack:
            prune_snapshots(
                self.spark, self.settings, self.state_table, self.snapshot_tables, self.source, self.jid,
                kept[-self.keep_snapshots],
            )  # fmt: skip
            kept = kept[-self.keep_snapshots :]
        self._carried = Resume(state, dict(done.snapshots), kept)
        summary = self.summary_type(
            source=self.source,
            job=self.jid,
            start_us=start_us,
            end_us=end_us,
            arrivals=done.arrivals,
            state_rows=done.state_rows,
            seconds=time.monotonic() - t0,
            **done.figures,
        )
        self.finish(summary)
        return summary

    def _write_state(
        self, end_us: int, first: int, now_us: int, before: Mapping[str, int], done: Step
    ) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from outoforder.io import delta

        lake = self.settings.lake_root
        key: dict[str, str | int] = {"source": self.source, "job": self.jid, "as_of_us": end_us}
        tagged = [F.lit(v).alias(k) for k, v in key.items()]
        by_name = {t.name: t for t in self.snapshot_tables}
        unknown = sorted(set(done.snapshots) - set(by_name))
        if unknown:
            msg = f"{self.name} wrote snapshots of {unknown}, which are not among its snapshot tables"
            raise SchemaError(msg)
        for name, rows in done.snapshots.items():
            table = by_name[name]
            own = [f.name for f in table.schema.fields if f.name not in key]
            delta.append_once(
                rows.select(*tagged, *own), table, lake, self._app, end_us, self.settings.storage
            )
        values = {
            **key,
            "interval_start_us": first,
            "written_at_us": now_us,
            **{c: before[c] + int(done.added.get(c, 0)) for c in self.counters},
            **done.state,
        }
        names = self.state_table.schema.fieldNames()
        missing = [n for n in names if n not in values]
        if missing:
            msg = f"{self.name}'s state row lacks {missing}"
            raise SchemaError(msg)
        row = tuple(values[n] for n in names)
        delta.append_rows(self.spark, self.state_table, lake, self.settings.storage, [row], self._app, end_us)
        return values

    # --- where the job is -------------------------------------------------------------------

    def last_processed(self) -> int | None:
        """The end of the newest interval the job has processed (None before its first run)."""
        last, self._first = job_extent(self.spark, self.settings, self.state_table, self.source, self.jid)
        return last

    def first_start(self) -> int | None:
        """The start of the job's first interval (every state row carries it); None before its first run.

        It never changes once the job has run: read with :meth:`last_processed`, or once.
        """
        if self._first is None:
            _, self._first = job_extent(self.spark, self.settings, self.state_table, self.source, self.jid)
        return self._first

    def ingested_until(self, start_us: int, end_us: int) -> int:
        """Up to where the file ingest of the source has delivered ``[start_us, end_us)`` (µs, exclusive).

        The time of the source's newest ingest, or just after the newest arrival in bronze if that
        is later: a file landing at ``T`` is taken to hold the arrivals up to ``T`` (a live
        collector's), so files of a source continue it in arrival order. An interval that ends
        after both may still be filled by a file not ingested yet: a scheduled run stops here, as it
        waits for the Kafka ingest's coverage on a topic. The ingest log (small) answers first;
        bronze is read only from ``start_us`` on, and only when the log does not cover ``end_us``.
        """
        from pyspark.sql import functions as F

        from outoforder.io import delta
        from outoforder.io.tables import BRONZE, INGEST_LOG

        lake = self.settings.lake_root
        logged = 0
        if delta.exists(self.spark, INGEST_LOG, lake):
            at = (
                delta.read(self.spark, INGEST_LOG, lake)
                .where((F.col("source") == self.source) & (F.col("status") == "done"))
                .agg(F.max("ingested_at_us"))
                .first()
            )
            logged = int(at[0]) if at is not None and at[0] is not None else 0
        if logged >= end_us:
            return logged
        newest = (
            delta.read_arrivals(self.spark, BRONZE, lake, source=self.source)
            .where(F.col("arrival_ts") >= max(logged, start_us))
            .agg(F.max("arrival_ts"))
            .first()
        )
        return max(logged, int(newest[0]) + 1) if newest is not None and newest[0] is not None else logged

    def pending_span(self) -> tuple[int, int] | None:
        """The arrivals still to process: [resume point, newest arrival + 1), or None when there are none."""
        return pending_span(self.spark, self.settings, self.source, self.last_processed())

    def run(
        self,
        start_us: int | None = None,
        end_us: int | None = None,
        every_us: int | None = None,
        catch_up: bool = False,
    ) -> list[S]:
        """Run the intervals of ``[start, end)`` in steps of ``every_us`` (default: one interval).

        A missing start is where the job stopped (or the source's first arrival); a missing end is
        just after the newest arrival in bronze. Logs each interval's progress line.

        ``catch_up`` (what the scheduled DAG runs ask for): when the job has stopped somewhere
        before ``end``, start there instead of at ``start``, so that a run covers whatever its
        predecessors left, whether the scheduler's run times drifted apart (a gap) or together
        (an overlap), or runs were skipped; with ``every_us``, in whole steps from there (what is
        left before ``end`` waits for the next run). A run whose ``end`` the job has passed
        already reruns its own interval as given (a rerun of a processed interval changes nothing).
        A run never steps past what the ingest has delivered: for a file source, the newest
        arrival in bronze or its newest ingest's time (:meth:`ingested_until`), in whole steps; for
        a topic, the Kafka ingest's coverage (waited for in :meth:`run_interval`).
        """
        done = self.last_processed()
        if done is None:  # the job's first run: a misspelt source or stream would run green on nothing
            check_input(self.spark, self.settings, self.source, self.streams(), self.what)
        if catch_up and start_us is not None and end_us is not None:
            # a topic's coverage is waited for per interval (run_interval), a file source's here
            covered = None if self._kafka else self.ingested_until
            start_us, end_us, notes = scheduled_span(start_us, end_us, every_us, done, covered)
            for note in notes:
                log.info("[%s] %s: %s", self.name, self.source, note)
            if end_us <= start_us:
                return []
        if start_us is None or end_us is None:
            span = pending_span(self.spark, self.settings, self.source, done)
            if span is None:
                log.info("[%s] %s: every arrival in bronze is processed already", self.name, self.source)
                return []
            start_us = span[0] if start_us is None else start_us
            if end_us is None and self._kafka:  # up to what the Kafka ingest covers (run_interval)
                from outoforder.stages.ingest.kafka_batches import covered_until

                end_us = min(span[1], covered_until(self.settings, self.source) or start_us)
                if end_us <= start_us:
                    log.info("[%s] %s: the Kafka ingest covers nothing new yet", self.name, self.source)
                    return []
            end_us = span[1] if end_us is None else end_us
        summaries = []
        steps = interval_steps(start_us, end_us, every_us or end_us - start_us, done, self._busy_steps)
        for lo, hi in steps:
            self.before_interval(lo)
            summary = self.run_interval(lo, hi)
            log.info("%s", summary.line())
            summaries.append(summary)
            self.after_interval(summary)
        return summaries
