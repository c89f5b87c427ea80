"""What the stream join has seen and produced: the history that adaptation, repair and the checks judge.

The arrivals of the job's streams since its first interval (or a span of arrival or event time)
are joined exactly (the truth) and matched against the pairs the stream stage stored in
``gold/join_results``. Two forms:

- in Spark (:func:`horizon`, :func:`job_arrivals`, :func:`truth`, :func:`produced`), for the
  checks and the repair: the exact join runs in Spark tasks and only counts per period, or nothing,
  reach the driver, however long the history;
- as arrays (:func:`judged`), for the adaptation, which looks at the last few periods only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from outoforder.config import Settings
from outoforder.core.joins.query import JoinInput, PairArray, exact_join
from outoforder.errors import StateError
from outoforder.io.tables import JOIN_RESULTS, JOIN_STATE
from outoforder.stages import state
from outoforder.stages.join.inputs import input_from_frame, join_tuples
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.state import where_job

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.stages.context import StageContext


@dataclass(frozen=True)
class Horizon:
    """Where a job's stream join stands at a time: its first interval and its newest state by then."""

    first_us: int  # the start of the job's first interval
    as_of_us: int  # the end of the newest interval processed at or before the time asked
    progress_us: int | None  # the joint progress min(M_R, M_S) then (None until both streams had one)


def horizon(ctx: StageContext, at_us: int) -> Horizon | None:
    """The job's :class:`Horizon` at ``at_us``; None when no interval of it ended by then."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    row = state.state_at(spark, settings, JOIN_STATE, source, job.job_id(), at_us)
    if row is None:
        return None
    m_r, m_s = row["m_r"], row["m_s"]
    progress = None if m_r is None or m_s is None else min(int(m_r), int(m_s))
    # every state row carries the start of the job's first interval: no second read of the table
    return Horizon(int(row["interval_start_us"]), int(row["as_of_us"]), progress)


def job_arrivals(
    ctx: StageContext,
    arrived: tuple[int, int],
    event_ts: tuple[int | None, int | None] = (None, None),
) -> DataFrame:
    """The job's tuples (:func:`~outoforder.stages.join.stream.join_tuples`) that arrived in ``[lo, hi)``.

    ``event_ts`` narrows them to ``[lo, hi)`` of event time (None: open); Delta skips the files
    whose statistics fall outside.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    bronze = delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, arrival_ts_range=arrived)
    lo, hi = event_ts
    if lo is not None:
        bronze = bronze.where(F.col("event_ts") >= F.lit(lo))
    if hi is not None:
        bronze = bronze.where(F.col("event_ts") < F.lit(hi))
    return join_tuples(bronze, job)


def truth(arrivals: DataFrame, job: JoinJob) -> DataFrame:
    """The exact join of ``arrivals`` (r_seq, s_seq, r_ts, s_ts), computed by Spark tasks."""
    from outoforder.spark.joins import exact_pairs

    return exact_pairs(arrivals, job.query())


def stored(
    spark: SparkSession, settings: Settings, source: str, jid: str, seqs: tuple[int, int] | None = None
) -> DataFrame:
    """Each distinct pair (r_seq, s_seq) the job stored, its ``copies`` (rows) and ``ts`` (later event time).

    With ``seqs`` (inclusive), only the pairs whose tuples both lie in it: Delta skips every results
    file of other arrivals, so reading is proportional to the span judged, not to the history.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta

    results = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(where_job(source, jid))
    if seqs is not None:
        lo, hi = seqs
        results = results.where(F.col("r_seq").between(lo, hi) & F.col("s_seq").between(lo, hi))
    return results.groupBy("r_seq", "s_seq").agg(
        F.count("*").alias("copies"), F.max(F.greatest("r_ts", "s_ts")).alias("ts")
    )


def produced(
    spark: SparkSession, settings: Settings, source: str, jid: str, seqs: tuple[int, int]
) -> DataFrame:
    """The distinct pairs (r_seq, s_seq) the job stored whose tuples both lie in ``seqs`` (inclusive)."""
    return stored(spark, settings, source, jid, seqs).select("r_seq", "s_seq")


@dataclass(frozen=True)
class JudgedHistory:
    """The history as a join input, its exact join, which true pairs the stream produced, arrival_seqs."""

    inp: JoinInput
    truth: PairArray
    produced: npt.NDArray[np.bool_]
    seqs: npt.NDArray[np.int64]


def arrivals(
    ctx: StageContext,
    until_us: int,
    span_us: int | None = None,
) -> pd.DataFrame:
    """The arrivals the job has seen before ``until_us``, in arrival order.

    All of them since its first interval, or only the last ``span_us`` of arrival time.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    jid = job.job_id()
    first = state.first_start(spark, settings, JOIN_STATE, source, jid)
    if first is None:
        msg = f"the stream join of {source} ({jid}) has not run yet: nothing to adapt or check"
        raise StateError(msg)
    lo = max(first, until_us - (span_us or until_us))
    return (
        delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, arrival_ts_range=(lo, until_us))
        .where(F.col("stream").isin(*job.r_streams, *job.s_streams))
        .select("arrival_seq", "stream", "event_ts", "x", "y", "key")
        .orderBy("arrival_seq")
        .toPandas()
    )


def produced_mask(
    spark: SparkSession,
    settings: Settings,
    source: str,
    jid: str,
    seqs: npt.NDArray[np.int64],
    truth: PairArray,
) -> npt.NDArray[np.bool_]:
    """Which true pairs (arrival indices) the stream stage produced; reads only the pairs among ``seqs``."""
    if truth.size == 0:
        return np.zeros(0, dtype=bool)
    got = produced(spark, settings, source, jid, (int(seqs.min()), int(seqs.max()))).toPandas()
    base = int(seqs.size) + 1
    pos_r = np.searchsorted(seqs, got["r_seq"].to_numpy(np.int64))
    pos_s = np.searchsorted(seqs, got["s_seq"].to_numpy(np.int64))
    inside = (pos_r < seqs.size) & (pos_s < seqs.size)
    inside[inside] &= (seqs[pos_r[inside]] == got["r_seq"].to_numpy()[inside]) & (
        seqs[pos_s[inside]] == got["s_seq"].to_numpy()[inside]
    )
    codes = pos_r[inside] * base + pos_s[inside]
    return np.isin(truth[:, 0] * base + truth[:, 1], codes)


def judged(
    ctx: StageContext,
    until_us: int,
    span_us: int | None = None,
) -> JudgedHistory | None:
    """The history judged against the exact join (None when nothing arrived in it)."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    pdf = arrivals(ctx, until_us, span_us)
    if pdf.empty:
        return None
    inp = input_from_frame(pdf, job, f"the history of {source}")
    truth = exact_join(inp, job.query())
    seqs = pdf["arrival_seq"].to_numpy(np.int64)
    return JudgedHistory(inp, truth, produced_mask(spark, settings, source, job.job_id(), seqs, truth), seqs)
