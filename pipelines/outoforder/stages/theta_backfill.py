"""θ-join backfills over event-time ranges of bronze, and θ-joins of a user's own files.

A :class:`ThetaJob` names streams ``S0, S1, …`` of one bronze source, a numeric column and the
chained predicates ``S0.c θ0 S1.c θ1 S2.c …``. Event time is cut into tumbling windows of
``window_us``; the tuples of every stream in one window form that window's datasets, joined with
:func:`outoforder.spark.theta.multiway_join` (FastThetaJoin by default). One run covers an interval
``[start, end)`` of whole windows and replaces exactly that slice of

- ``gold/theta_results``: one row per result (the arrival_seq and join value of each stream);
- ``gold/theta_windows``: per window the rows and null rows per stream, output rows, rows
  compared, partition pairs and seconds,

so reruns and overlapping backfills leave the tables as one clean run would.
:func:`validate` is the Great Expectations completeness check: for sampled windows the stored
result count equals an independent DuckDB count over the same bronze rows, and no result repeats.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.core.theta.plan import Theta
from outoforder.errors import ConfigError, InputError, QualityError
from outoforder.io.conflicts import retry_on_conflict

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.config import Settings

COLUMNS = ("value", "x", "y", "z", "event_ts")
PREFILTERS = ("none", "mcf", "semi")  # see outoforder.spark.mcf


@dataclass(frozen=True)
class ThetaJob:
    """What to θ-join: streams of a source, the join column, chained predicates, window; and how."""

    streams: tuple[str, ...] = ("ball", "team_a")
    column: str = "value"
    predicates: tuple[str, ...] = ("<",)
    window_us: int = 1_000_000
    method: str = "fast"
    partitions: int = 8
    prefilter: str = "none"  # equi-joins only: drop rows whose key another stream lacks (MCF, semi-join)

    def __post_init__(self) -> None:
        if len(self.streams) < 2:
            msg = f"a θ-join needs at least two streams, got {list(self.streams)}"
            raise ConfigError(msg)
        if len(self.predicates) != len(self.streams) - 1:
            msg = (
                f"{len(self.streams)} streams need {len(self.streams) - 1} chained predicates "
                f"(S0 θ0 S1 θ1 S2 …), got {list(self.predicates)}"
            )
            raise ConfigError(msg)
        if self.column not in COLUMNS:
            msg = f"join column {self.column!r} is not one of {', '.join(COLUMNS)}"
            raise ConfigError(msg)
        if self.window_us <= 0:
            msg = f"window must be positive, got {self.window_us} µs"
            raise ConfigError(msg)
        thetas = self.thetas()  # parse errors surface when the job is built
        if self.prefilter not in PREFILTERS:
            msg = f"unknown pre-filter {self.prefilter!r}: use one of {', '.join(PREFILTERS)}"
            raise ConfigError(msg)
        if self.prefilter != "none" and any(t.op != "=" for t in thetas):
            msg = (
                f"the {self.prefilter} pre-filter needs an equi-join (every predicate '='), "
                f"got {list(self.predicates)}"
            )
            raise ConfigError(msg)

    def thetas(self) -> list[Theta]:
        """The parsed predicates."""
        return [Theta.parse(p) for p in self.predicates]


def job_id(job: ThetaJob) -> str:
    """A stable id of the query (method, partitions and pre-filter are left out: same rows).

    >>> job_id(ThetaJob()) == job_id(ThetaJob(method="cfs", partitions=3))
    True
    """
    spec = {k: v for k, v in asdict(job).items() if k not in ("method", "partitions", "prefilter")}
    return "th-" + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def windows(job: ThetaJob, start_us: int, end_us: int) -> list[int]:
    """Window starts of ``[start, end)``, which must be whole windows."""
    w = job.window_us
    if end_us <= start_us or start_us % w or end_us % w:
        msg = (
            f"the interval [{start_us}, {end_us}) µs must be non-empty and cut at multiples of the "
            f"window ({w} µs); e.g. [{start_us // w * w}, {-(-end_us // w) * w})"
        )
        raise ConfigError(msg)
    return list(range(start_us, end_us, w))


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


def _window_frames(bronze: DataFrame, job: ThetaJob, w0: int) -> list[DataFrame]:
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

    starts = windows(job, start_us, end_us)
    jid, t0 = job_id(job), time.monotonic()
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
                _window_frames(bronze, job, w0), cols, job.prefilter, count_rows=job.prefilter != "none"
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
            print(
                f"[theta] window {k + 1}/{len(starts)} @ {w0} µs: rows {[n for n, _ in per_stream]}{kept}, "
                f"{n_out} results ({time.monotonic() - tw:.1f} s)",
                flush=True,
            )
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


def duckdb_count(frames: list[Any], job: ThetaJob) -> int:
    """The independent count: the same chained θ-join in DuckDB over pandas frames ``s{i}_v``."""
    import duckdb

    con = duckdb.connect()
    names = [f"t{i}" for i in range(len(frames))]
    for name, df in zip(names, frames, strict=True):
        con.register(name, df)
    conds = []
    for i, theta in enumerate(job.thetas()):
        a, b = f"t{i}.s{i}_v", f"t{i + 1}.s{i + 1}_v"
        conds.append(_sql(theta, a, b))
    valid = [f"not isnan({n}.s{i}_v)" for i, n in enumerate(names)]  # NaN never matches (as in Spark)
    q = f"select count(*) from {', '.join(names)} where {' and '.join(conds + valid)}"
    return int(con.execute(q).fetchone()[0])  # type: ignore[index]


def _sql(theta: Theta, a: str, b: str) -> str:
    if theta.op == "band":
        return f"abs({a} - {b}) <= {theta.band!r}"
    return f"{a} {'=' if theta.op == '=' else theta.op} {b}"


@retry_on_conflict
def validate(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: ThetaJob,
    start_us: int,
    end_us: int,
    sample: int = 3,
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[Any]:
    """GX completeness of ``[start, end)``: every window was run, no result row repeats.

    Every window's stored rows equal the count its run reported; for ``sample`` windows, evenly
    spread, they also equal DuckDB's count of the same θ-join over the same bronze rows. ``fail``
    None follows ``quality.on_violation``.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, THETA_RESULTS, THETA_WINDOWS
    from outoforder.quality.checkpoints import conclude, run_checkpoint

    starts = windows(job, start_us, end_us)
    jid = job_id(job)
    if not delta.exists(spark, THETA_WINDOWS, settings.lake_root):
        msg = f"no θ-join backfill has run yet (no {THETA_WINDOWS.name} under {settings.lake_root})"
        raise QualityError(msg)
    in_range = (F.col("window_start_us") >= start_us) & (F.col("window_start_us") < end_us)
    mine = (F.col("source") == source) & (F.col("job") == jid) & in_range
    ran = {r[0]: r[1] for r in delta.read(spark, THETA_WINDOWS, settings.lake_root).where(mine)
           .select("window_start_us", "output_rows").collect()}  # fmt: skip
    results = delta.read(spark, THETA_RESULTS, settings.lake_root).where(mine)
    stored = {r[0]: r[1] for r in results.groupBy("window_start_us").count().collect()}
    picks = sorted(
        {starts[round(i * (len(starts) - 1) / max(sample - 1, 1))] for i in range(min(sample, len(starts)))}
    )
    bronze = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == source)
    independent = {
        w0: duckdb_count([f.toPandas() for f in _window_frames(bronze, job, w0)], job) for w0 in picks
    }
    judged = spark.createDataFrame(
        [(w0, w0 in ran, int(stored.get(w0, 0)), int(ran.get(w0, -1)), independent.get(w0)) for w0 in starts],
        "window_start_us long, ran boolean, stored long, reported long, independent long",
    )
    keyed = results.select(F.concat_ws(",", "window_start_us", F.concat_ws(",", "seqs")).alias("result_key"))
    suites = run_checkpoint(
        settings, "theta", {"theta_completeness": judged, "theta_results": keyed},
        source=source, job=jid, run_name=run_name,
    )  # fmt: skip
    conclude(
        suites,
        f"θ-join {jid} of {source}: {len(starts)} windows, {len(picks)} checked against DuckDB",
        settings.quality.fails(fail),
    )
    return suites


def read_user_frames(spark: SparkSession, paths: list[Path], column: str) -> list[DataFrame]:
    """One stream per file (CSV with a header, or Parquet): its row number and the join column."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    frames = []
    for i, path in enumerate(paths):
        if not path.is_file():
            msg = f"no such file: {path}"
            raise InputError(msg)
        reader = (
            spark.read.format("parquet") if path.suffix == ".parquet" else spark.read.option("header", True)
        )
        df = reader.load(str(path)) if path.suffix == ".parquet" else reader.csv(str(path))
        if column not in df.columns:
            msg = f"{path} has no column {column!r} (columns: {', '.join(df.columns)})"
            raise InputError(msg)
        order = Window.orderBy(F.monotonically_increasing_id())
        frames.append(
            df.select(
                (F.row_number().over(order) - 1).cast("long").alias(f"s{i}_seq"),
                # a value that does not parse becomes null: excluded from the join and counted
                F.expr(f"try_cast(`{column}` as double)").alias(f"s{i}_v"),
            )
        )
    return frames
