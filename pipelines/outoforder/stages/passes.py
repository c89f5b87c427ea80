"""The skeleton of a stream stage: one pass per run, from the job's state to what the ingest has covered.

A stream stage follows the stream, not the scheduler. Whenever it runs (every minute, once over a
day's backlog, killed and run again), a run:

1. **finds where the job stands**: its newest state row (:class:`Position`), read on the driver
   without a Spark job (:mod:`outoforder.io.deltars`). None means the job's first pass, which
   starts at the run's ``start`` (or the source's first arrival);
2. **plans the span** ``[position, end)``: up to the run's ``end`` (a DAG run's data interval end;
   none: as far as bronze goes), never past what the ingest has covered (for a topic, the Kafka
   ingest's coverage, waited for up to ``kafka.cover_wait_s``; for files, the ingest log). Nothing
   new: the run ends at once. A span of more than ``stream.pass_budget_arrivals`` arrivals (a
   backlog) is cut into several passes (:meth:`PassStage.cuts`), each one as below;
3. **clears what a killed pass left**: every append of a pass is tagged with the pass's start
   (``source|job|start``); a tagged commit newer than the versions the state recorded is the work
   of a pass that died before writing its state, and its rows are deleted (:meth:`PassStage.orphans`)
   before the pass runs again, so nothing is written twice;
4. **runs the operator over the whole span in one pass** (:meth:`PassStage.compute`): one read of
   bronze and of the kept state, the operator in Spark tasks, its output checkpointed once, its
   figures observed on the same job;
5. **writes each output table once** (a plain append: one Spark job, one commit) and the state
   **last**, with the versions of the outputs' commits;
6. logs one progress line (:class:`PassSummary`).

Catching up ten minutes therefore costs about what one minute costs, and the results do not depend
on how the runs cut the stream: the operators adapt at their own cadence inside the pass (the
tests hold one run, runs of a minute, of seconds and of random lengths, killed and resumed, to the
same rows). Old snapshots are deleted every :data:`PRUNE_EVERY` passes.
"""

from __future__ import annotations

import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from outoforder.config import Settings
from outoforder.core.time import format_instant_us
from outoforder.errors import InputError, NothingYet, StateError
from outoforder.io.conflicts import retrying
from outoforder.io.figures import record as record_figures
from outoforder.stages.context import StageContext
from outoforder.stages.spec import Job

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)
J = TypeVar("J", bound=Job)
PRUNE_EVERY = 30  # passes between two deletions of a job's old state snapshots
KEEP_SNAPSHOTS = 2  # snapshots a prune keeps (the newest: the next pass's; one before it, for the checks)
OPEN_END = 2**62  # "as far as there are arrivals"


@dataclass(frozen=True)
class Position:
    """Where a job stands: the newest state row (see the module docstring)."""

    as_of_us: int  # every arrival before this arrival time is processed
    first_us: int  # the start of the job's first pass
    last_seq: int | None  # the newest arrival processed (None: none yet)
    counters: Mapping[str, int]
    scalars: str  # the operator's own state (JSON)
    outputs: Mapping[str, int]  # each output table's version after this state's pass wrote it
    passes: int


@dataclass(frozen=True, kw_only=True)
class PassSummary:
    """What one run of a stream stage did; each stage adds its own figures (:meth:`figures`)."""

    stage: ClassVar[str] = "stream"
    source: str
    job: str
    start_us: int
    end_us: int
    arrivals: int
    state_rows: int  # what the stage carries to the next pass (bounded by stream.state_budget_rows)
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


S = TypeVar("S", bound=PassSummary)


@dataclass(frozen=True)
class Pass:
    """What a stage's :meth:`~PassStage.compute` works on."""

    start_us: int
    end_us: int
    now_us: int  # wall clock of the run, for the written_at_us columns
    tag: str  # every commit of the pass carries it
    position: Position | None  # None: the job's first pass


@dataclass(frozen=True)
class Computed:
    """A pass's output (checkpointed) and what the driver learnt of it on the same job."""

    out: DataFrame
    state: Mapping[str, Any]  # the operator's new state and the pass's figures (from the task)
    rows: Mapping[str, int] = field(default_factory=dict)  # output rows per output table


class PassStage(ABC, Generic[J, S]):
    """A stream stage (see the module docstring for the order of work)."""

    name: ClassVar[str]  # the stage, as the CLI and the progress lines call it
    job_type: ClassVar[type[Job]]
    what: ClassVar[str]  # what its state is of, in messages ("stream join")
    state_table: ClassVar[Table]
    outputs: ClassVar[tuple[Table, ...]]  # written before the state, in this order
    counters: ClassVar[tuple[str, ...]] = ("arrivals",)  # cumulative columns of the state row
    kinds: ClassVar[Mapping[str, tuple[str, ...]]]  # an output table's name -> its rows' kinds in the output
    error_kind: ClassVar[str] = "x"  # the kind of the row a task writes when it refuses its input
    seq_columns: ClassVar[Mapping[str, str]]  # an output table's name -> its column of arrival order
    stream_only: ClassVar[tuple[str, ...]] = ()  # output tables other stages write too (produced_by)
    summary_type: type[S]

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.source = source = ctx.bronze_source
        self.job: J = cast(J, ctx.job_of(self.job_type))
        self.jid = self.job.job_id()
        self._app = f"{source}|{self.jid}"
        decl = self.settings.sources.get(source)
        self._kafka = decl is not None and bool(decl.topic)
        self._written: dict[str, int] = {}  # rows each output table got in this run (for figures)

    @property
    def spark(self) -> SparkSession:
        """The session (opened on first use: a run with nothing to do never starts one)."""
        return self.ctx.spark

    # --- hooks ------------------------------------------------------------------------------

    @abstractmethod
    def compute(self, p: Pass) -> Computed:
        """Read the span and the kept state, run the operator, checkpoint its output once."""

    @abstractmethod
    def output_rows(self, table: Table, c: Computed, p: Pass) -> DataFrame:
        """The rows of one output table, from the pass's output."""

    @abstractmethod
    def state_rows(self, c: Computed, p: Pass, row: Mapping[str, Any]) -> DataFrame:
        """The new state snapshot: ``row`` (the state row's values) and the operator's kept rows."""

    def orphans(self, table: Table, position: Position | None) -> str:
        """A SQL condition on ``table``'s rows that a pass from ``position`` writes (and nothing else).

        A pass writes the rows of arrivals after the position's newest (on a first pass, all), and
        in the tables it shares with the repair (:attr:`stream_only`), only ``stream`` rows.
        """
        from outoforder.io.delta import where_sql

        cond = where_sql({"source": self.source, "job": self.jid})
        if table.name in self.stream_only:
            cond += " AND produced_by = 'stream'"
        last = None if position is None else position.last_seq
        if last is not None:
            cond += f" AND {self.seq_columns[table.name]} > {int(last)}"
        return cond

    def refused(self, p: Pass, error: str) -> Exception:
        """The error to raise when the task refused its input (``error``: the task's message)."""
        where = f"{self.source} ({self.jid}) in [{p.start_us}, {p.end_us})"
        return StateError(f"the {self.what} of {where} cannot run: {error}")

    def summary(self, p: Pass, c: Computed, seconds: float) -> S:
        """The run's summary (stages add their figures)."""
        figures = c.state.get("figures", {})
        return self.summary_type(
            source=self.source, job=self.jid, start_us=p.start_us, end_us=p.end_us,
            arrivals=int(figures.get("arrivals", 0)), state_rows=int(figures.get("kept", 0)),
            seconds=seconds,
        )  # fmt: skip

    def finish(self, summary: S) -> None:
        """After the state is written."""

    # --- where the job is -------------------------------------------------------------------

    def position(self) -> Position | None:
        """The job's newest state row (None before its first pass); read without Spark."""
        row = state_row(self.settings, self.state_table, self.source, self.jid, counters=self.counters)
        if row is None:
            return None
        return Position(
            as_of_us=int(row["as_of_us"]),
            first_us=int(row["first_us"]),
            last_seq=None if row["last_seq"] is None else int(row["last_seq"]),
            counters={c: int(row.get(c) or 0) for c in self.counters},
            scalars=str(row["scalars"]),
            outputs={k: int(v) for k, v in json.loads(row["outputs"] or "{}").items()},
            passes=int(row["passes"] or 0),
        )

    def covered(self, start_us: int, end_us: int) -> int:
        """Up to where (µs, exclusive) the ingest has delivered the source's arrivals of ``[start, end)``."""
        if self._kafka:
            from outoforder.stages.ingest.kafka_batches import wait_covered

            return wait_covered(self.settings, self.source, end_us)
        return self._files_covered(start_us, end_us)

    def _files_covered(self, start_us: int, end_us: int) -> int:
        """A file source: its newest ingest's time, or just after the newest arrival in bronze if later.

        A file landing at ``T`` is taken to hold the arrivals up to ``T`` (a live collector's). The
        ingest log answers on the driver; bronze is read (Spark) only when the log does not cover
        ``end_us``.
        """
        import pyarrow.compute as pc
        from pyspark.sql import functions as F

        from outoforder.io import delta, deltars
        from outoforder.io.tables import BRONZE, INGEST_LOG

        done = deltars.read_table(
            INGEST_LOG, self.settings.lake_root, self.settings.storage,
            [("source", "=", self.source), ("status", "=", "done")], columns=["ingested_at_us"],
        )  # fmt: skip
        logged = 0
        if done is not None and done.num_rows:
            logged = int(pc.max(done.column("ingested_at_us")).as_py())
        if logged >= end_us:
            return logged
        newest = (
            delta.read_arrivals(self.spark, BRONZE, self.settings.lake_root, source=self.source)
            .where(F.col("arrival_ts") >= max(logged, start_us))
            .agg(F.max("arrival_ts"))
            .first()
        )
        return max(logged, int(newest[0]) + 1) if newest is not None and newest[0] is not None else logged

    def pending(self) -> tuple[int, int] | None:
        """The arrivals still to process: (where the job stands, or the first arrival; the newest + 1).

        None when there are none. Reads bronze (the main job and the CLI ask; a scheduled run does not).
        """
        from outoforder.stages.state import pending_span

        pos = self.position()
        return pending_span(self.spark, self.settings, self.source, None if pos is None else pos.as_of_us)

    def first_arrival(self) -> int | None:
        """The source's first arrival time (a job's first pass without a start begins there)."""
        from pyspark.sql import functions as F

        from outoforder.io import delta
        from outoforder.io.tables import BRONZE

        row = (
            delta.read_arrivals(self.spark, BRONZE, self.settings.lake_root, source=self.source)
            .agg(F.min("arrival_ts"))
            .first()
        )
        if row is None or row[0] is None:
            msg = (
                f"bronze has no arrivals with an arrival_ts for source {self.source!r}: the stream stages "
                "follow arrival time (a declared source gets one from its `arrival` field, docs/sources.md)"
            )
            raise InputError(msg)
        return int(row[0])

    def streams(self) -> dict[str, tuple[str, ...]]:
        """The job's streams by role (the join's R and S); an empty tuple means every stream."""
        return {"streams": tuple(getattr(self.job, "streams", ()))}

    # --- the run ----------------------------------------------------------------------------

    def run(self, start_us: int | None = None, end_us: int | None = None, catch_up: bool = False) -> S | None:
        """One pass from where the job stands up to ``end_us`` (see the module docstring).

        ``start_us`` matters only for the job's first pass: later passes start where the job
        stands, and a start after that is refused (it would skip arrivals) unless ``catch_up``
        (a scheduled run, whose interval starts wherever the scheduler's clock says). Returns the
        pass's summary, or None when there was nothing new to process.
        """
        if start_us is not None and end_us is not None and end_us <= start_us:
            msg = f"empty span [{start_us}, {end_us}): --end must come after --start"
            raise InputError(msg)
        t0 = time.monotonic()
        pos = self.position()
        reach: int | None = None  # how far the ingest covers the run's end, once asked (a wait)
        if pos is None and self._kafka and end_us is not None:
            reach = self.covered(start_us or 0, end_us)
            if not reach:
                # a declared topic the ingest has not delivered from yet (live mode's first
                # minute): nothing to do, not a missing input
                msg = f"the ingest has delivered nothing from the topic of {self.source!r} yet"
                if catch_up:
                    raise NothingYet(msg)
                log.info("[%s] %s", self.name, msg)
                return None
        if pos is None:
            from outoforder.stages.state import check_input

            # the job's first pass: a misspelt source or stream would run green on nothing; a
            # scheduled run is skipped instead, saying what bronze has (a DAG unpaused before its
            # stream started: the stream may yet come)
            check_input(self.spark, self.settings, self.source, self.streams(), self.what, scheduled=catch_up)
            lo = start_us if start_us is not None else self.first_arrival()
            assert lo is not None
        else:
            lo = pos.as_of_us
            if start_us is not None and start_us > lo and not catch_up:
                msg = (
                    f"the {self.what} of {self.source} ({self.jid}) has processed arrivals up to {lo}; "
                    f"a pass from {start_us} would skip [{lo}, {start_us}): run without --start (a "
                    f"backfill: from {format_instant_us(lo)} on)"
                )
                raise StateError(msg)
        hi = OPEN_END if end_us is None else end_us
        if hi <= lo:
            log.info("[%s] %s: processed up to %d already: nothing to do", self.name, self.source, lo)
            return None
        if reach is None:
            reach = self.covered(lo, hi)
        if reach < hi:
            if end_us is not None:
                log.info("[%s] %s: the ingest covers arrivals up to %d: the pass stops there", self.name,
                         self.source, reach)  # fmt: skip
            hi = reach
        if hi <= lo:
            log.info("[%s] %s: nothing new ingested after %d", self.name, self.source, lo)
            return None
        cuts = self.cuts(lo, hi)
        if len(cuts) > 2:
            log.info(
                "[%s] %s: more than stream.pass_budget_arrivals = %s arrivals to process: %d passes",
                self.name, self.source, f"{self.settings.stream.pass_budget_arrivals:,}", len(cuts) - 1,
            )  # fmt: skip
        summary: S | None = None
        self._written = {}
        arrivals = 0
        for a, b in pairwise(cuts):
            start = pos if a == lo else self.position()
            summary = retrying(f"{self.name}.run", partial(self._pass, start, a, b, t0))
            log.info("%s", summary.line())
            self.finish(summary)
            arrivals += summary.arrivals
            t0 = time.monotonic()
        assert summary is not None
        for table in (*self.outputs, self.state_table):  # for the run's asset events
            rows = summary.state_rows if table is self.state_table else self._written.get(table.name, 0)
            record_figures(
                table.name, source=self.source, job=self.jid, start_us=lo, end_us=hi, arrivals=arrivals,
                rows=rows, passes=len(cuts) - 1,
            )  # fmt: skip
        return summary

    def cuts(self, lo: int, hi: int) -> list[int]:
        """``[lo, …, hi]``: the span cut so that a pass reads ``stream.pass_budget_arrivals`` at most.

        Bronze's log counts the source's arrivals per file and the arrival times each holds (no Spark
        job); a cut falls where a file's arrivals end, so a pass holds one file at least (the
        ingest writes files of ``ingest.file_rows``) and the estimate errs by the files a span's
        ends cut through. Most runs have one pass: ``[lo, hi]``.
        """
        from outoforder.io import deltars
        from outoforder.io.tables import BRONZE

        budget = self.settings.stream.pass_budget_arrivals
        files = sorted(
            (last, n)
            for first, last, n in deltars.file_ranges(
                BRONZE, self.settings.lake_root, self.settings.storage, ("source", self.source), "arrival_ts"
            )
            if last >= lo and first < hi
        )
        if sum(n for _, n in files) <= budget:
            return [lo, hi]
        cuts, held, ended = [lo], 0, lo
        for last, n in files:
            if held and held + n > budget and cuts[-1] < ended < hi:
                cuts.append(ended)
                held = 0
            held += n
            ended = last + 1
        return [*cuts, hi]

    def _pass(self, pos: Position | None, lo: int, hi: int, t0: float) -> S:
        from outoforder.io import delta

        lake = self.settings.lake_root
        for t in (self.state_table, *self.outputs):
            delta.ensure(self.spark, t, lake)
        p = Pass(lo, hi, time.time_ns() // 1000, f"{self._app}|{lo}", pos)
        self._clear_orphans(p)
        c = self.compute(p)
        figures = c.state.get("figures", {})
        self._check_budget(hi, int(figures.get("kept", 0)))
        outputs = dict(pos.outputs) if pos is not None else {}
        written: dict[str, int] = {}
        for table in self.outputs:
            if not c.rows.get(table.name):
                continue
            delta.append(self.output_rows(table, c, p), table, lake, p.tag)
            outputs[table.name] = self._own_commit(table, p.tag)
            written[table.name] = int(c.rows[table.name])
        before = pos.counters if pos is not None else {}
        last = figures.get("last_seq")
        passes = (pos.passes if pos is not None else 0) + 1
        row = {
            "source": self.source,
            "job": self.jid,
            "as_of_us": hi,
            "kind": "state",
            "first_us": lo if pos is None else pos.first_us,
            "last_seq": (pos.last_seq if pos is not None else None) if last is None else int(last),
            "passes": passes,
            "scalars": json.dumps(c.state.get("scalars")),
            "outputs": json.dumps(outputs, sort_keys=True),
            "written_at_us": p.now_us,
            **{k: int(before.get(k, 0)) + int(figures.get(k, 0)) for k in self.counters},
        }
        delta.append(self.state_rows(c, p, row), self.state_table, lake, p.tag)
        for name, n in written.items():  # counted once the pass is committed (a retry starts over)
            self._written[name] = self._written.get(name, 0) + n
        if passes % PRUNE_EVERY == 0:
            self._prune(hi)
        return self.summary(p, c, time.monotonic() - t0)

    # --- helpers for compute() ---------------------------------------------------------------

    def checkpointed(self, p: Pass, out: DataFrame) -> Computed:
        """``out`` checkpointed (one job), then its ``s`` and error rows read back (one small job).

        The ``s`` row's text is the task's JSON: the operator's new scalars and the pass's figures,
        among them ``rows``, the rows it emitted per kind (summed per output table by :attr:`kinds`).
        Raises :meth:`refused`'s error if the task refused its input, StateError if it wrote no state.
        """
        from pyspark.sql import functions as F

        out = out.localCheckpoint()
        got = {
            r["kind"]: r["text"]
            for r in out.where(F.col("kind").isin("s", self.error_kind)).select("kind", "text").collect()
        }
        if got.get(self.error_kind) is not None:
            raise self.refused(p, got[self.error_kind])
        if not got.get("s"):  # the task always ends with its state row
            msg = f"the {self.what} pass of {self.source} ({self.jid}) returned no state"
            raise StateError(msg)
        state = json.loads(got["s"])
        counts = state.get("figures", {}).get("rows", {})
        rows = {name: sum(int(counts.get(k, 0)) for k in ks) for name, ks in self.kinds.items()}
        return Computed(out, state, rows)

    def kept(self, p: Pass, kinds: tuple[str, ...], columns: list[str], schema: Any) -> DataFrame | None:
        """The position's kept rows of ``kinds`` (None on a first pass), read on the driver: no Spark job.

        Small by construction (what a pass carries to the next: bounded by the operator's windows and
        history, and by ``stream.state_budget_rows``); they reach the task with the plan.
        """
        from outoforder.io import deltars

        if p.position is None:
            return None
        filters: list[deltars.Filter] = [
            ("source", "=", self.source), ("job", "=", self.jid), ("as_of_us", "=", p.position.as_of_us),
            ("kind", "in", list(kinds)),
        ]  # fmt: skip
        lake, storage = self.settings.lake_root, self.settings.storage
        got = deltars.read_table(self.state_table, lake, storage, filters, columns=columns)
        return self.spark.createDataFrame([] if got is None else got.to_pandas(), schema)

    def _own_commit(self, table: Table, tag: str) -> int:
        from outoforder.io import deltalog

        return deltalog.own_commit(table.path(self.settings.lake_root), tag, self.settings.storage)

    def _clear_orphans(self, p: Pass) -> None:
        """Delete what a pass from the same position wrote before it was killed (module docstring, 3)."""
        from outoforder.io import delta, deltalog

        pos = p.position
        for table in self.outputs:
            after = -1 if pos is None else pos.outputs.get(table.name, -1)
            path = table.path(self.settings.lake_root)
            if not deltalog.tagged_commits(path, p.tag, after, self.settings.storage):
                continue
            cond = self.orphans(table, pos)
            log.warning(
                "[%s] %s: a pass from %d was killed after writing %s: deleting its rows (%s) before it "
                "runs again",
                self.name, self.source, p.start_us, table.name, cond,
            )  # fmt: skip
            self.spark.sql(
                f"DELETE FROM {delta.table_sql(table, self.settings.lake_root)} WHERE {cond}"
            ).collect()

    def _check_budget(self, end_us: int, rows: int) -> None:
        from outoforder.stages.state import check_state_budget

        check_state_budget(self.settings, self.what, self.source, self.jid, end_us, rows)

    def _prune(self, as_of_us: int) -> None:
        """Delete all but the newest :data:`KEEP_SNAPSHOTS` state snapshots of the job."""
        from outoforder.io import delta, deltars

        rows = deltars.read_table(
            self.state_table, self.settings.lake_root, self.settings.storage,
            [("source", "=", self.source), ("job", "=", self.jid), ("kind", "=", "state")],
            columns=["as_of_us"],
        )  # fmt: skip
        ends = sorted({int(v) for v in rows.column("as_of_us").to_pylist()}) if rows is not None else []
        if len(ends) <= KEEP_SNAPSHOTS:
            return
        below = ends[-KEEP_SNAPSHOTS]
        delta.delete_where(
            self.spark, self.state_table, self.settings.lake_root,
            {"source": self.source, "job": self.jid}, ("as_of_us", below), look_first=False,
        )  # fmt: skip
        log.info("[%s] %s: state snapshots before %d deleted (newest %d kept)", self.name, self.source, below,
                 as_of_us)  # fmt: skip


STATE_COLUMNS = (
    "as_of_us",
    "first_us",
    "last_seq",
    "passes",
    "scalars",
    "outputs",
)  # every stage's state row


def state_row(
    settings: Settings,
    table: Table,
    source: str,
    job: str,
    at_us: int | None = None,
    counters: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """A job's newest state row as of ``at_us`` (default: its newest), read without Spark; None: none.

    The state row of a pass stage's table (``kind = "state"``: as_of_us, first_us, last_seq, the
    counters, the operator's scalars, ...): where the job stood when its pass up to ``as_of_us``
    ended. The checks ask where the job stood at the end of the interval they judge.
    """
    from outoforder.io import deltars

    filters: list[deltars.Filter] = [("source", "=", source), ("job", "=", job), ("kind", "=", "state")]
    if at_us is not None:
        filters.append(("as_of_us", "<=", at_us))
    cols = [*STATE_COLUMNS, *counters]
    rows = deltars.read_table(table, settings.lake_root, settings.storage, filters, columns=cols)
    if rows is None or rows.num_rows == 0:
        return None
    newest: dict[str, Any] = max(rows.to_pylist(), key=lambda r: int(r["as_of_us"]))
    return newest
