"""The stream join as a pipeline stage: one arrival-time interval per run, state carried in Delta.

``join-stream`` (:class:`JoinStream`, on the skeleton of :mod:`outoforder.stages.interval`)
processes the bronze arrivals of ``[start, end)`` (by ``arrival_ts``) with QJoin's Spark twin
(:func:`outoforder.spark.joins.qjoin_batch`):

1. the operator state *as of* ``start`` (stream maxima, horizons, buffered tuples) comes from
   ``silver/join_state`` and ``silver/join_buffer``;
2. the retention in force is the newest row of ``silver/join_params`` valid from ``start`` or
   earlier (written by ``join-adapt``, :mod:`outoforder.stages.join.adapt`), or the initial one;
3. result pairs are appended to ``gold/join_results`` with the interval, the retention and the
   parameter version that produced them, once per interval (a rerun writes nothing, see
   :mod:`outoforder.stages.interval`);
4. the state as of ``end`` is written last.

A *job* is one query and target (:class:`~outoforder.stages.join.spec.JoinJob`); its id is a
digest of them, so two joins of one source (say two targets) keep separate state and results.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.config import Settings
from outoforder.errors import InputError
from outoforder.io.tables import JOIN_BUFFER, JOIN_PARAMS, JOIN_RESULTS, JOIN_STATE
from outoforder.stages.context import StageContext
from outoforder.stages.interval import Interval, IntervalStage, IntervalSummary, Step
from outoforder.stages.join.inputs import join_tuples
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.state import where_job

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

INITIAL_PARAMS_VERSION = -1


@dataclass(frozen=True, kw_only=True)
class JoinIntervalSummary(IntervalSummary):
    """What one run of the stream join did."""

    stage: ClassVar[str] = "join-stream"
    new_pairs: int
    total_pairs: int
    buffered: int
    d_r_us: int
    d_s_us: int
    params_version: int

    def figures(self) -> str:
        """Pairs, buffered tuples and the retention in force."""
        return (
            f"{self.new_pairs:,} new pairs ({self.total_pairs:,} so far), {self.buffered:,} buffered, "
            f"d = ({self.d_r_us / 1000:g}, {self.d_s_us / 1000:g}) ms (params {self.params_version})"
        )


def result_rows(
    pairs: DataFrame,
    source: str,
    jid: str,
    produced_by: str,
    interval: tuple[int, int],
    retention: tuple[int, int, int],
    written_at_us: int,
) -> DataFrame:
    """Pairs (r_seq, s_seq, r_ts, s_ts, emitted_at_seq) as rows of ``gold/join_results``.

    ``retention`` is (d_r, d_s, parameter version) in force when they were produced.
    """
    from pyspark.sql import functions as F

    d_r, d_s, version = retention
    return pairs.select(
        F.lit(source).alias("source"), F.lit(jid).alias("job"), "r_seq", "s_seq", "r_ts", "s_ts",
        "emitted_at_seq", F.lit(produced_by).alias("produced_by"),
        F.lit(interval[0]).cast("long").alias("interval_start_us"),
        F.lit(interval[1]).cast("long").alias("interval_end_us"),
        F.lit(d_r).cast("long").alias("d_r_us"), F.lit(d_s).cast("long").alias("d_s_us"),
        F.lit(version).cast("long").alias("params_version"),
        F.lit(written_at_us).cast("long").alias("written_at_us"),
    )  # fmt: skip


def params_in_force(
    spark: SparkSession, settings: Settings, source: str, jid: str, at_us: int
) -> tuple[int, int, int]:
    """(d_r, d_s, version) valid at ``at_us``; (0, 0, -1) before any adaptation.

    The stage then runs with the job's initial retention (:meth:`JoinJob.initial_retention_us_for`).
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta

    delta.ensure(spark, JOIN_PARAMS, settings.lake_root)
    row = (
        delta.read(spark, JOIN_PARAMS, settings.lake_root)
        .where(where_job(source, jid) & (F.col("valid_from_us") <= at_us))
        .orderBy(F.col("valid_from_us").desc())
        .select("d_r_us", "d_s_us", "valid_from_us")
        .first()
    )
    return (0, 0, INITIAL_PARAMS_VERSION) if row is None else (int(row[0]), int(row[1]), int(row[2]))


class JoinStream(IntervalStage[JoinJob, JoinIntervalSummary]):
    """QJoin over arrival-time intervals; :meth:`run` also adapts the retention at the job's cadence.

    The time since the job's first interval is cut into slots of ``adapt_every_us`` (by default the
    job's L; 0: never adapt). Before an interval that starts in a slot with no adaptation yet, the
    retention is adapted from the history before the interval's start: every interval when L is
    shorter than the intervals, every L when it is longer. Deciding from what is stored (not from
    this run's memory) makes a resumed run adapt at the same times as one that never stopped: a
    run killed between an interval's commits and the adaptation after it used to resume past that
    time with the older retention (found by the reliability run, docs/reliability.md).
    """

    name = "join-stream"
    job_type = JoinJob
    what = "stream join"
    state_table = JOIN_STATE
    snapshot_tables = (JOIN_BUFFER,)
    tables = (JOIN_RESULTS,)
    counters = ("arrivals", "pairs")
    summary_type = JoinIntervalSummary

    def streams(self) -> dict[str, tuple[str, ...]]:
        """R's and S's streams: a join with no row on either side would run green on nothing."""
        return {"R": self.job.r_streams, "S": self.job.s_streams}

    def __init__(self, ctx: StageContext, adapt_every_us: int | None = None, **skeleton: Any) -> None:
        super().__init__(ctx, **skeleton)
        self.adapt_every_us = self.job.interval_us if adapt_every_us is None else adapt_every_us
        self._anchor: int | None = None
        self._slot_adapted: int | None = None  # the slot this run found adapted (no need to read again)

    def tuples(self, bronze: DataFrame) -> DataFrame:
        """See :func:`join_tuples`."""
        return join_tuples(bronze, self.job)

    def step(self, interval: Interval, prev: Mapping[str, Any] | None) -> Step:
        """QJoin's Spark twin over the interval, from the buffered tuples of ``prev``."""
        from pyspark.sql import functions as F

        from outoforder.spark.joins import TUPLE_COLS, QJoinState, qjoin_batch
        from outoforder.spark.rows import one_row

        source, jid, lo, hi = self.source, self.jid, interval.start_us, interval.end_us
        if prev is None:
            state = QJoinState.empty(self.spark)
        else:
            buffer = self.snapshot(JOIN_BUFFER, prev).select(*TUPLE_COLS)
            state = QJoinState(prev["m_r"], prev["m_s"], prev["h_r"], prev["h_s"], buffer)
        d_r, d_s, version = params_in_force(self.spark, self.settings, source, jid, lo)
        if version == INITIAL_PARAMS_VERSION:
            d_r = d_s = self.job.initial_retention_us_for(hi - lo)

        batch = self.arrivals(lo, hi)
        size = one_row(
            batch.agg(F.count("*"), F.min("seq"), F.max("seq"), F.sum(F.col("no_location").cast("long")))
        )
        n = int(size[0])
        if self.job.predicate == "distance" and size[3]:
            msg = f"{size[3]} arrivals of {source} in [{lo}, {hi}) have no x/y: a distance join needs them"
            raise InputError(msg)
        batch = (
            batch.drop("no_location")
            .withColumn("d_r", F.lit(d_r).cast("long"))
            .withColumn("d_s", F.lit(d_s).cast("long"))
        )
        pairs, new_state = qjoin_batch(
            batch, state, self.job.query(), size=(n, int(size[1] or 0), int(size[2] or 0))
        )
        results = result_rows(
            pairs.withColumnRenamed("emitted_at", "emitted_at_seq"), source, jid, "stream", (lo, hi),
            (d_r, d_s, version), interval.now_us,
        ).localCheckpoint()  # fmt: skip
        produced = results.count()
        appended = self.append(results, JOIN_RESULTS, interval) if produced else None
        buffer = new_state.buffer.localCheckpoint()
        buffered = buffer.count()
        new = produced if appended is not None and appended.result() else 0
        return Step(
            arrivals=n,
            state={"m_r": new_state.m_r, "m_s": new_state.m_s, "h_r": new_state.h_r, "h_s": new_state.h_s},
            state_rows=buffered,  # the buffered tuples are the join's whole state
            snapshots={JOIN_BUFFER.name: buffer},
            added={"arrivals": n, "pairs": produced},
            figures={
                "new_pairs": new,
                "total_pairs": interval.before["pairs"] + produced,
                "buffered": buffered,
                "d_r_us": d_r,
                "d_s_us": d_s,
                "params_version": version,
            },
        )

    def before_interval(self, start_us: int) -> None:
        """Adapt the retention before the first interval of each slot (class docstring), unless done."""
        from outoforder.stages.join.adapt import adapt

        if not self.adapt_every_us:
            return
        if self._anchor is None:  # the job's first interval, or this run's first if it is the job's first
            self._anchor = self.first_start() or start_us
        lo = start_us - self._anchor
        slot_start = self._anchor + lo // self.adapt_every_us * self.adapt_every_us
        if lo <= 0 or slot_start == self._slot_adapted:
            return
        if params_in_force(self.spark, self.settings, self.source, self.jid, start_us)[2] >= slot_start:
            self._slot_adapted = slot_start
            return
        try:
            adapt(self.ctx, start_us)
            self._slot_adapted = slot_start
        except InputError as e:  # nothing has arrived yet (a live stream's first minutes)
            log.info("[join-stream] %s: the retention stays as it is: %s", self.source, e)


def run_interval(ctx: StageContext, start_us: int, end_us: int) -> JoinIntervalSummary:
    """One interval of the stream join (see :class:`JoinStream`)."""
    return JoinStream(ctx).run_interval(start_us, end_us)
