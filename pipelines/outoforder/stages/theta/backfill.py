"""θ-join backfills over event-time ranges of bronze (the ``theta-join`` stage on a source).

A :class:`~outoforder.stages.theta.spec.ThetaJob` names streams ``S0, S1, …`` of one bronze source,
a numeric column and the chained predicates ``S0.c θ0 S1.c θ1 S2.c …``. Event time is cut into
tumbling windows of ``window_us``; the tuples of every stream in one window form that window's
datasets, joined with :func:`outoforder.spark.theta.multiway_join` (FastThetaJoin by default). One
run covers an interval ``[start, end)`` of whole windows and replaces exactly that slice of

- ``gold/theta_results``: one row per result (the arrival_seq and join value of each stream);
- ``gold/theta_windows``: per window the rows and null rows per stream, output rows, rows
  compared, partition pairs and seconds,

so reruns and overlapping backfills leave the tables as one clean run would. The completeness
check is :mod:`outoforder.stages.theta.validate`; joins of a user's files are
:mod:`outoforder.stages.theta.files`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.errors import StateError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages.theta.spec import ThetaJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.config import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackfillSummary:
    """What one backfill run did."""

    job: str
    windows: int
    output_rows: int
    rows_compared: int
    seconds: float

    def line(self) -> str:
        """One line for logs."""
        return (
            f"[theta] {self.job}: {self.windows} windows, {self.output_rows} result rows, "
            f"{self.rows_compared} rows compared, {self.seconds:.1f} s"
        )


def window_frames(bronze: DataFrame, job: ThetaJob, w0: int) -> list[DataFrame]:
    """Per stream, its rows of the window starting at ``w0``: (``s{i}_seq``, ``s{i}_v``)."""
    from pyspark.sql import functions as F

    in_window = (F.col("event_ts") >= w0) & (F.col("event_ts") < w0 + job.window_us)
    return [
        bronze.where(in_window & (F.col("stream") == name)).select(
            F.col("arrival_seq").alias(f"s{i}_seq"), F.col(job.column).cast("double").alias(f"s{i}_v")
        )
        for i, name in enumerate(job.streams)
    ]


def _counts(bronze: DataFrame, job: ThetaJob) -> dict[tuple[int, str], tuple[int, int]]:
    """(window start, stream) -> (rows, null/NaN join values), one job for the interval."""
    from pyspark.sql import functions as F

    v = F.col(job.column).cast("double")
    bad = v.isNull() | F.isnan(v)
    w0 = F.col("event_ts") - F.pmod(F.col("event_ts"), F.lit(job.window_us))
    got = (
        bronze.groupBy(w0.alias("w0"), "stream")
        .agg(F.count(F.lit(1)).alias("n"), F.count(F.when(bad, 1)).alias("nulls"))
        .collect()
    )
    return {(int(r["w0"]), r["stream"]): (int(r["n"]), int(r["nulls"])) for r in got}


@retry_on_conflict
def event_range(spark: SparkSession, settings: Settings, source: str) -> tuple[int, int]:
    """The first and the last event time of ``source`` in bronze (µs); a StateError when it has none."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    row = (
        delta.read(spark, BRONZE, settings.lake_root)
        .where(F.col("source") == source)
        .agg(F.min("event_ts"), F.max("event_ts"))
        .first()
    )
    if row is None or row[0] is None:
        msg = f"no tuples of {source} in bronze"
        raise StateError(msg)
    return int(row[0]), int(row[1])


def run_interval(
    spark: SparkSession, settings: Settings, source: str, job: ThetaJob, start_us: int, end_us: int
) -> BackfillSummary:
    """θ-join every window of ``[start, end)`` and replace that slice of the two gold tables."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, THETA_RESULTS, THETA_WINDOWS
    from outoforder.spark.mcf import prefilter
    from outoforder.spark.theta import multiway_join

    starts = job.windows(start_us, end_us)
    jid, t0 = job.job_id(), time.monotonic()
    bronze = (
        delta.read(spark, BRONZE, settings.lake_root)
        .where(
            (F.col("source") == source)
            & F.col("stream").isin(*set(job.streams))
            & (F.col("event_ts") >= start_us)
            & (F.col("event_ts") < end_us)
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    result_frames: list[DataFrame] = []  # persisted until written
    try:
        counts = _counts(bronze, job)
        stats_rows = []
        for k, w0 in enumerate(starts):
            tw = time.monotonic()
            cols = [f"s{i}_v" for i in range(len(job.streams))]
            frames, pre = prefilter(
                window_frames(bronze, job, w0), cols, job.prefilter, count_rows=job.prefilter != "none"
            )
            res = multiway_join(frames, cols, job.thetas(), job.method, job.partitions)
            rows = res.rows.select(
                F.lit(source).alias("source"),
                F.lit(jid).alias("job"),
                F.lit(w0).cast("long").alias("window_start_us"),
                F.array(*[F.col(f"s{i}_seq") for i in range(len(job.streams))]).alias("seqs"),
                F.array(*[F.col(f"s{i}_v") for i in range(len(job.streams))]).alias("vals"),
            ).persist(StorageLevel.MEMORY_AND_DISK)
            result_frames.append(rows)
            n_out = rows.count()
            res.release()
            every = [st for rnd in res.rounds for st in rnd]
            per_stream = [counts.get((w0, name), (0, 0)) for name in job.streams]
            stats_rows.append(
                (
                    source, jid, w0, w0 + job.window_us, job.method, job.partitions,
                    [n for n, _ in per_stream], [z for _, z in per_stream], n_out,
                    sum(st.rows_compared for st in every), sum(st.partition_pairs for st in every),
                    round(time.monotonic() - tw, 3), end_us, job.prefilter, pre.rows_kept or None,
                )
            )  # fmt: skip
            kept = f", kept by the {job.prefilter} pre-filter {pre.rows_kept}" if pre.rows_kept else ""
            log.info(
                "[theta] window %d/%d @ %d µs: rows %s%s, %d results (%.1f s)",
                k + 1, len(starts), w0, [n for n, _ in per_stream], kept, n_out, time.monotonic() - tw,
            )  # fmt: skip
        out = result_frames[0]
        for extra in result_frames[1:]:
            out = out.unionByName(extra)
        between = ("window_start_us", start_us, end_us)
        match: dict[str, str | int] = {"source": source, "job": jid}
        delta.replace_where(out, THETA_RESULTS, settings.lake_root, match, between)
        windows_df = spark.createDataFrame(stats_rows, THETA_WINDOWS.schema)
        delta.replace_where(windows_df, THETA_WINDOWS, settings.lake_root, match, between)
    finally:
        for df in result_frames:
            df.unpersist()
        bronze.unpersist()
    return BackfillSummary(
        jid,
        len(starts),
        sum(r[8] for r in stats_rows),
        sum(r[9] for r in stats_rows),
        time.monotonic() - t0,
    )
