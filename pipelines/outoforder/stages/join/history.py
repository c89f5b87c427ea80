"""What the stream join has seen and produced: the history that adaptation, repair and the checks judge.

The arrivals of the job's streams since its first interval (or a span of arrival or event time)
are joined exactly (the truth) and matched against the pairs the stream stage stored in
``gold/join_results``. Two forms:

- in Spark (:func:`horizon`, :func:`job_arrivals`, :func:`truth`, :func:`produced`), for the
  checks and the repair: the exact join runs in Spark tasks and only counts per period, or nothing,
  reach the driver, however long the history. (The adaptation needs none of it: it decides inside
  the stream stage's pass, :mod:`outoforder.core.joins.adaptive`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.core.joins.progress import NEG
from outoforder.io.tables import JOIN_RESULTS, JOIN_STATE
from outoforder.stages.join.inputs import join_tuples
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.state import where_job

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.stages.context import StageContext


@dataclass(frozen=True)
class Horizon:
    """Where a job's stream join stands at a time: its first interval and its newest state by then."""

    first_us: int  # the start of the job's first pass
    as_of_us: int  # the end of the newest pass that ended at or before the time asked
    progress_us: int | None  # the joint progress min(M_R, M_S) then (None until both streams had one)
    last_seq: int | None = None  # the newest arrival the job had processed then
    origin_us: int | None = None  # the earliest event time of its tuples then (None: not recorded)


def horizon(ctx: StageContext, at_us: int | None) -> Horizon | None:
    """The job's :class:`Horizon` at ``at_us`` (None: its newest); None when no pass of it ended by then."""
    import json

    from outoforder.spark.join_pass import ORIGIN
    from outoforder.stages.passes import state_row

    job = ctx.job_of(JoinJob)
    row = state_row(ctx.settings, JOIN_STATE, ctx.bronze_source, job.job_id(), at_us)
    if row is None:
        return None
    scalars = json.loads(row["scalars"])
    m = scalars["m"]
    progress = None if min(m) <= NEG else min(int(m[0]), int(m[1]))
    last, origin = row.get("last_seq"), scalars.get(ORIGIN)
    return Horizon(
        int(row["first_us"]), int(row["as_of_us"]), progress, None if last is None else int(last),
        None if origin is None else int(origin),
    )  # fmt: skip


def first_start(ctx: StageContext) -> int | None:
    """The start of the job's first pass (None before it ran)."""
    from outoforder.stages.passes import state_row

    row = state_row(ctx.settings, JOIN_STATE, ctx.bronze_source, ctx.job_of(JoinJob).job_id())
    return None if row is None else int(row["first_us"])


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
