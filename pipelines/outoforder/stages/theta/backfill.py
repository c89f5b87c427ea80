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
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outoforder.errors import StateError
from outoforder.io.conflicts import retry_on_conflict, retrying
from outoforder.stages.context import StageContext
from outoforder.stages.state import check_input
from outoforder.stages.theta.spec import ThetaJob

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

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


ROWS_PER_PART = 2_000_000  # bronze rows a part of a long backfill holds at once (persisted)


def run_interval(
    ctx: StageContext,
    start_us: int,
    end_us: int,
    rows_per_part: int = ROWS_PER_PART,
) -> BackfillSummary:
    """θ-join every window of ``[start, end)`` and replace that slice of the two gold tables.

    One job counts the rows of every window (the interval is never held at once). Consecutive
    windows are then taken in parts of at most ``rows_per_part`` bronze rows (at least one window
    each), so a day-long backfill holds one part at a time: each part's rows are persisted, joined
    and written (replacing exactly its slice), then released. Within a part, with FastThetaJoin,
    every window whose streams fit one task (one range partition per link,
    :func:`~outoforder.core.theta.plan.partitions_for`) is joined in a single Spark job: the window
    is the key of a group, and each group's chain is joined by sorting in its task, after the
    window's own pre-filters. Larger windows, and the other methods, are joined one window at a
    time with :func:`outoforder.spark.theta.multiway_join`.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(ThetaJob)
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    starts = job.windows(start_us, end_us)
    t0 = time.monotonic()

    def source_or_skip() -> None:  # a typo, or a stream not started yet: the run is skipped, saying so
        check_input(spark, settings, source, {"streams": job.streams}, "θ-join", scheduled=True)

    if not delta.exists(spark, BRONZE, settings.lake_root):
        source_or_skip()
    scope = (
        delta.read(spark, BRONZE, settings.lake_root)
        .where(
            (F.col("source") == source)
            & F.col("stream").isin(*set(job.streams))
            & (F.col("event_ts") >= start_us)
            & (F.col("event_ts") < end_us)
        )
        .select("event_ts", "stream", "arrival_seq", job.column)
    )
    counts = _counts(scope, job)
    if not counts:  # an empty interval: only then is the source looked up (a job over its streams)
        source_or_skip()
    parts = _parts(starts, counts, job, rows_per_part)
    output = compared = 0
    for k, windows in enumerate(parts):
        out, tested = _run_part(ctx, scope, counts, windows, end_us)
        output, compared = output + out, compared + tested
        if len(parts) > 1:
            log.info(
                "[theta] part %d/%d: %d windows from %d µs, %d results (%.0f s so far)",
                k + 1, len(parts), len(windows), windows[0], out, time.monotonic() - t0,
            )  # fmt: skip
    return BackfillSummary(job.job_id(), len(starts), output, compared, time.monotonic() - t0)


def _parts(
    starts: list[int], counts: dict[tuple[int, str], tuple[int, int]], job: ThetaJob, rows_per_part: int
) -> list[list[int]]:
    """Consecutive window starts in parts of at most ``rows_per_part`` rows (at least one window).

    >>> from outoforder.stages.theta.spec import ThetaJob
    >>> job = ThetaJob(column="x", predicates=("<",), window_us=10)
    >>> counts = {(0, "ball"): (5, 0), (10, "team_a"): (5, 0), (20, "ball"): (20, 0)}
    >>> _parts([0, 10, 20, 30], counts, job, 10)
    [[0, 10], [20], [30]]
    """
    parts: list[list[int]] = []
    held = rows_per_part  # a new part begins at the first window
    for w0 in starts:
        rows = sum(counts.get((w0, name), (0, 0))[0] for name in set(job.streams))
        if held + rows > rows_per_part or not parts:
            parts.append([])
            held = 0
        parts[-1].append(w0)
        held += rows
    return parts


def _run_part(
    ctx: StageContext,
    scope: DataFrame,
    counts: dict[tuple[int, str], tuple[int, int]],
    starts: list[int],
    written_at: int,
) -> tuple[int, int]:
    """Join the windows ``starts`` (consecutive) and replace their slice; (results, rows compared)."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(ThetaJob)
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import THETA_RESULTS, THETA_WINDOWS

    start_us, end_us = starts[0], starts[-1] + job.window_us
    jid, t0 = job.job_id(), time.monotonic()
    bronze = scope.where((F.col("event_ts") >= start_us) & (F.col("event_ts") < end_us)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    result_frames: list[DataFrame] = []  # persisted until written
    try:
        grouped, alone = _split_windows(job, counts, starts)
        per_window: dict[int, _WindowRow] = {}
        if grouped:
            rows, per_window = _join_grouped(spark, bronze, source, job, start_us, alone)
            result_frames.append(rows)
            log.info(
                "[theta] %d windows in one job, a task each: %d results (%.1f s)",
                len(grouped), sum(w.output for w in per_window.values()), time.monotonic() - t0,
            )  # fmt: skip
        for k, w0 in enumerate(alone):
            rows, per_window[w0] = _join_window(bronze, source, job, w0)
            result_frames.append(rows)
            kept = (
                f", kept by the {job.prefilter} pre-filter {per_window[w0].kept}"
                if per_window[w0].kept
                else ""
            )
            log.info(
                "[theta] window %d/%d @ %d µs on its own: rows %s%s, %d results (%.1f s)",
                k + 1, len(alone), w0, [counts.get((w0, n), (0, 0))[0] for n in job.streams], kept,
                per_window[w0].output, per_window[w0].seconds,
            )  # fmt: skip
        stats_rows = []
        for w0 in starts:
            w = per_window.get(w0) or _WindowRow(
                kept=[0] * len(job.streams) if job.prefilter != "none" else None
            )
            per_stream = [counts.get((w0, name), (0, 0)) for name in job.streams]
            stats_rows.append(
                (
                    source, jid, w0, w0 + job.window_us, job.method, job.partitions,
                    [n for n, _ in per_stream], [z for _, z in per_stream], w.output, w.compared, w.pairs,
                    round(w.seconds, 3), written_at, job.prefilter, w.kept,
                )
            )  # fmt: skip
        if result_frames:
            out = result_frames[0]
            for extra in result_frames[1:]:
                out = out.unionByName(extra)
        else:
            out = spark.createDataFrame([], THETA_RESULTS.schema)
        between = ("window_start_us", start_us, end_us)
        match: dict[str, str | int] = {"source": source, "job": jid}
        windows_df = spark.createDataFrame(stats_rows, THETA_WINDOWS.schema)

        def write() -> None:
            delta.replace_where(out, THETA_RESULTS, settings.lake_root, match, between)
            delta.replace_where(windows_df, THETA_WINDOWS, settings.lake_root, match, between)

        # Backfill runs over disjoint ranges of one source replace disjoint slices, yet Delta checks
        # a replaceWhere's conflicts by partition, so each may lose to the other's commit: the write
        # is retried alone (the rows come from bronze, not from the tables written, and are persisted)
        retrying("theta.write", write)
    finally:
        for df in result_frames:
            df.unpersist()
        bronze.unpersist()
    return sum(r[8] for r in stats_rows), sum(r[9] for r in stats_rows)


@dataclass
class _WindowRow:
    """One window's counters for ``gold/theta_windows``."""

    output: int = 0
    compared: int = 0
    pairs: int = 0
    seconds: float = 0.0
    kept: list[int] | None = None  # rows kept by the pre-filter per stream (None: no pre-filter)


def _split_windows(
    job: ThetaJob, counts: dict[tuple[int, str], tuple[int, int]], starts: list[int]
) -> tuple[list[int], list[int]]:
    """Window starts joined in one job, a task each (those that fit one), and those joined alone."""
    from outoforder.core.theta.plan import partitions_for

    if job.method != "fast":
        return [], starts
    thetas = job.thetas()
    grouped: list[int] = []
    alone: list[int] = []
    for w0 in starts:
        valid = [n - z for n, z in (counts.get((w0, name), (0, 0)) for name in job.streams)]
        fits = all(
            partitions_for(th, valid[i], valid[i + 1], job.partitions) == 1 for i, th in enumerate(thetas)
        )
        (grouped if fits else alone).append(w0)
    return grouped, alone


def _result_columns(source: str, jid: str) -> list[Column]:
    from pyspark.sql import functions as F

    return [F.lit(source).alias("source"), F.lit(jid).alias("job")]


def _join_window(bronze: DataFrame, source: str, job: ThetaJob, w0: int) -> tuple[DataFrame, _WindowRow]:
    """One window on Spark: the pre-filter, then the multi-way θ-join; its rows persisted and counted."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from outoforder.spark.mcf import prefilter
    from outoforder.spark.theta import multiway_join

    tw = time.monotonic()
    cols = [f"s{i}_v" for i in range(len(job.streams))]
    frames, pre = prefilter(
        window_frames(bronze, job, w0), cols, job.prefilter, count_rows=job.prefilter != "none"
    )
    res = multiway_join(frames, cols, job.thetas(), job.method, job.partitions)
    rows = res.rows.select(
        *_result_columns(source, job.job_id()),
        F.lit(w0).cast("long").alias("window_start_us"),
        F.array(*[F.col(f"s{i}_seq") for i in range(len(job.streams))]).alias("seqs"),
        F.array(*[F.col(f"s{i}_v") for i in range(len(job.streams))]).alias("vals"),
    ).persist(StorageLevel.MEMORY_AND_DISK)
    n_out = rows.count()
    res.release()
    every = [st for rnd in res.rounds for st in rnd]
    row = _WindowRow(
        n_out,
        sum(st.rows_compared for st in every),
        sum(st.partition_pairs for st in every),
        time.monotonic() - tw,
        pre.rows_kept or None,
    )
    return rows, row


# a window's result rows, and one tally row per window (``tally``: θ tests, results, seconds,
# rows kept per stream; null on result rows)
_GROUPED = "window_start_us long, seqs array<bigint>, vals array<double>, tally array<double>"


def _join_grouped(
    spark: SparkSession, bronze: DataFrame, source: str, job: ThetaJob, start_us: int, alone: list[int]
) -> tuple[DataFrame, dict[int, _WindowRow]]:
    """Every window but ``alone`` in one job: grouped by window, each chain joined in its task."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    w = len(job.streams)
    index = F.expr(f"(event_ts - {start_us}) div {job.window_us}")
    rows = bronze.select(
        index.alias("_w"), "stream", "arrival_seq", F.col(job.column).cast("double").alias("_v")
    )
    if alone:
        rows = rows.where(~F.col("_w").isin(*[(a - start_us) // job.window_us for a in alone]))
    joined = (
        rows.groupBy("_w")
        .applyInArrow(_window_joiner(job, start_us), _GROUPED)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    per: dict[int, _WindowRow] = {}
    for r in joined.where(F.col("tally").isNotNull()).select("window_start_us", "tally").collect():
        v = r["tally"]
        kept = [int(x) for x in v[3:]] if job.prefilter != "none" else None
        per[int(r["window_start_us"])] = _WindowRow(int(v[1]), int(v[0]), w - 1, float(v[2]), kept)
    out = (
        joined.where(F.col("tally").isNull())
        .select(*_result_columns(source, job.job_id()), "window_start_us", "seqs", "vals")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    out.count()
    joined.unpersist()
    return out, per


def _window_joiner(job: ThetaJob, start_us: int) -> Callable[[Any, Any], Any]:
    """The executors' join of one window's rows (an Arrow table): pre-filter, then the chain."""
    streams, thetas, pre, width = list(job.streams), job.thetas(), job.prefilter, job.window_us

    def join(key: Any, table: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        from outoforder.core.mcf.windowed import keep_shared
        from outoforder.core.theta.sortjoin import chain_join

        t = time.perf_counter()
        w0 = start_us + int(key[0].as_py()) * width
        stream = np.asarray(table.column("stream").to_numpy(zero_copy_only=False), dtype=object)
        seq = np.asarray(table.column("arrival_seq").to_numpy(zero_copy_only=False), dtype=np.int64)
        v = np.asarray(table.column("_v").to_numpy(zero_copy_only=False), dtype=np.float64)
        idx = [np.nonzero((stream == name) & ~np.isnan(v))[0] for name in streams]
        kept: list[float] = []
        if pre != "none":  # the window's own filters; -0.0 and 0.0 are one key
            masks = keep_shared([(v[i] + 0.0).view(np.int64) for i in idx], pre)
            idx = [i[m] for i, m in zip(idx, masks, strict=True)]
            kept = [float(i.size) for i in idx]
        chain = chain_join([v[i] for i in idx], thetas)
        n, k = chain.rows.shape
        picked = (
            np.stack([idx[j][chain.rows[:, j]] for j in range(k)], axis=1) if n else np.zeros((0, k), int)
        )
        offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
        tally = [float(chain.tested), float(n), time.perf_counter() - t, *kept]
        return pa.table(
            {
                "window_start_us": pa.array(np.full(n + 1, w0, dtype=np.int64)),
                "seqs": pa.concat_arrays(
                    [pa.ListArray.from_arrays(offsets, pa.array(seq[picked].ravel(), pa.int64())),
                     pa.nulls(1, pa.list_(pa.int64()))]
                ),
                "vals": pa.concat_arrays(
                    [pa.ListArray.from_arrays(offsets, pa.array(v[picked].ravel(), pa.float64())),
                     pa.nulls(1, pa.list_(pa.float64()))]
                ),
                "tally": pa.array([None] * n + [tally], pa.list_(pa.float64())),
            }
        )  # fmt: skip

    return join
