"""Continuous top-k as a pipeline: one arrival-time interval per run, the operator's state in Delta.

``topk-stream`` (:func:`run_interval`) processes the bronze arrivals of ``[start, end)`` (by
``arrival_ts``) with the pure operator :class:`~outoforder.core.topk.operator.ContinuousTopK`:

1. the operator and its cache controller are restored from the snapshot *as of* ``start`` in
   ``silver/topk_state`` (the first interval starts empty; a run that would skip arrivals fails
   and names the interval to run first);
2. the interval's arrivals are replayed in arrival order on the driver. The operator is a state
   machine over one arrival order, so it is sequential by nature; its state is small (k entries per
   open window). Spark reads and writes, and computes the exact top-k for the checks;
3. emitted windows go to ``gold/topk_windows`` (one row each, also when emitted empty) and their
   lists to ``gold/topk_results``; tuples that arrive after their window's emission go to
   ``silver/topk_late``; every controller decision (the K_min trace) goes to ``silver/topk_cache``.
   All are MERGEd on their keys, so a re-run inserts nothing;
4. the new snapshot is written last: a crash re-runs the interval from the old one.

``validate-topk`` (:func:`validate`) checks with Great Expectations, against the exact top-k of
bronze computed by Spark (:func:`outoforder.spark.topk.window_topk`): every window up to the last
emitted one is emitted once, or all its tuples came late; the mean accuracy over the closed windows
(those whose ``end + horizon`` the stream has passed) is at least ε_min.

A tuple with a null or NaN score is not ranked; it is counted per interval.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.core.topk.cache import CacheDurationController, CacheSettings
from outoforder.core.topk.operator import CachePolicy, ContinuousTopK, FixedCache, TopKQuery
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError, InputError, QualityError, StateError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages import intervals
from outoforder.stages.intervals import check_state_budget, prune_snapshots, snapshot_before, where_job

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.quality.checkpoints import SuiteResult

SCORE_COLUMNS = ("value", "x", "y", "z")


class NothingYet(QualityError):
    """The stream has emitted no window yet: there is nothing to judge (not a violation)."""


@dataclass(frozen=True)
class TopKJob:
    """The query (streams, score, k, windows) and the cache duration's settings (SEEDS.md §3)."""

    streams: tuple[str, ...] = ()  # empty: every stream of the source
    score: str = "value"
    k: int = 5
    window_us: int = 60_000_000
    slide_us: int = 5_000_000
    eps_min: float = 0.95
    initial_us: int = 2_000_000
    m: int = 10
    n: int = 30
    min_step_us: int = 10_000
    horizon_us: int = 10_000_000  # how long after an emission late tuples are awaited for scoring
    fixed_cache_us: int | None = None  # a fixed K instead of the adaptive duration

    def __post_init__(self) -> None:
        if self.score not in SCORE_COLUMNS:
            msg = f"score must be one of {', '.join(SCORE_COLUMNS)}, got {self.score!r}"
            raise ConfigError(msg)
        if self.fixed_cache_us is not None and self.fixed_cache_us < 0:
            msg = f"a fixed cache duration must be >= 0, got {self.fixed_cache_us}"
            raise ConfigError(msg)
        self.query()
        self.cache_settings()  # both validate their parameters

    def windows(self) -> Windows:
        """The sliding windows."""
        return Windows(self.window_us, self.slide_us)

    def query(self) -> TopKQuery:
        """The operator's query."""
        return TopKQuery(self.windows(), self.k, self.horizon_us)

    def cache_settings(self) -> CacheSettings:
        """The controller's settings."""
        return CacheSettings(float(self.initial_us), self.m, self.n, self.eps_min, float(self.min_step_us))

    def policy(self, snap: dict[str, Any] | None) -> CachePolicy:
        """A fresh cache policy, or the one a snapshot was taken from."""
        if self.fixed_cache_us is not None:
            return FixedCache(float(self.fixed_cache_us))
        if snap is None:
            return CacheDurationController(self.cache_settings())
        return CacheDurationController.restore(self.cache_settings(), snap)


def job_id(job: TopKJob) -> str:
    """A short stable id of a top-k job.

    >>> job_id(TopKJob()) == job_id(TopKJob())
    True
    >>> job_id(TopKJob(k=3)) == job_id(TopKJob())
    False
    """
    return "tk-" + hashlib.sha256(json.dumps(asdict(job), sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class IntervalSummary:
    """What one run of the stream stage did."""

    source: str
    job: str
    start_us: int
    end_us: int
    arrivals: int
    unscored: int
    windows: int
    late: int
    decisions: int
    k_min_us: float
    candidates: int
    seconds: float
    state_rows: int = 0  # every entry of the operator's state (what stream.state_budget_rows bounds)

    def line(self) -> str:
        """One progress line."""
        return (
            f"[topk-stream] {self.source} [{self.start_us}, {self.end_us}): {self.arrivals:,} arrivals "
            f"({self.unscored:,} without a score), {self.windows:,} windows emitted, {self.late:,} late "
            f"memberships, {self.decisions} cache decisions, K_min {self.k_min_us / 1e6:g} s, "
            f"|C| {self.candidates}, {self.seconds:.1f} s"
        )


def _tuples(df: DataFrame, job: TopKJob) -> DataFrame:
    """Bronze rows of the job's streams as operator input: seq, ts, score (null for NaN)."""
    from pyspark.sql import functions as F

    if job.streams:
        df = df.where(F.col("stream").isin(*job.streams))
    score = F.col(job.score)
    return df.select(
        F.col("arrival_seq").alias("seq"),
        F.col("event_ts").alias("ts"),
        F.when(F.isnan(score), None).otherwise(score).alias("score"),
    )


def _arrivals(
    spark: SparkSession, settings: Settings, source: str, job: TopKJob, lo: int, hi: int
) -> DataFrame:
    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    return _tuples(
        delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, arrival_ts_range=(lo, hi)), job
    )


@retry_on_conflict
def run_interval(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: TopKJob,
    start_us: int,
    end_us: int,
    keep_snapshots: int = 48,
) -> IntervalSummary:
    """Process the arrivals of ``[start_us, end_us)``; idempotent (see the module docstring)."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, TOPK_CACHE, TOPK_LATE, TOPK_RESULTS, TOPK_STATE, TOPK_WINDOWS

    if end_us <= start_us:
        msg = f"empty interval [{start_us}, {end_us})"
        raise InputError(msg)
    t0 = time.monotonic()
    jid = job_id(job)
    for t in (TOPK_STATE, TOPK_WINDOWS, TOPK_RESULTS, TOPK_LATE, TOPK_CACHE):
        delta.ensure(spark, t, settings.lake_root)  # the checks read them all, even when empty

    def has_arrivals(lo: int, hi: int) -> bool:
        return bool(_arrivals(spark, settings, source, job, lo, hi).limit(1).count())

    prev = snapshot_before(spark, settings, TOPK_STATE, source, jid, start_us, has_arrivals, "top-k")
    if prev is None:
        op, arrivals_before = ContinuousTopK(job.query(), job.policy(None)), 0
    else:
        try:
            snap = json.loads(prev["snapshot"])
            op = ContinuousTopK.restore(job.query(), job.policy(snap.get("cache")), snap["operator"])
        except (ValueError, KeyError, TypeError) as err:
            msg = f"the top-k snapshot of {source} ({jid}) as of {prev['as_of_us']} is unreadable"
            raise StateError(msg) from err
        arrivals_before = int(prev["arrivals"])

    rows = _arrivals(spark, settings, source, job, start_us, end_us).orderBy("seq").toPandas()
    seqs, tss, scores = rows["seq"].tolist(), rows["ts"].tolist(), rows["score"].tolist()
    windows: list[tuple[Any, ...]] = []
    results: list[tuple[int, int, int]] = []
    late: list[tuple[int, int, int, float]] = []
    trace: list[tuple[Any, ...]] = []
    unscored = 0
    w = job.windows()
    for seq, ts, score in zip(seqs, tss, scores, strict=True):
        if score is None or (isinstance(score, float) and math.isnan(score)):
            unscored += 1
            continue
        decided = len(op.decisions)
        step = op.process(int(ts), float(score), int(seq))
        for e in step.emitted:
            windows.append((e.window_id, w.bounds(e.window_id)[1], len(e.tids), int(seq), e.cache_us))
            results += [(e.window_id, r, t) for r, t in enumerate(e.tids, start=1)]
        late += [(int(seq), wid, int(ts), float(score)) for wid in step.late]
        for d in op.decisions[decided:]:
            trace.append(
                (source, jid, int(seq), int(op.progress), d.k_min_us, d.k_down_us, d.k_up_us, d.move,
                 [float(a) for a in d.accuracies], start_us)
            )  # fmt: skip

    now_us = time.time_ns() // 1000
    lit = {"source": F.lit(source), "job": F.lit(jid)}
    if windows:
        wdf = spark.createDataFrame(
            windows, "window_id long, window_end_us long, size long, emitted_at_seq long, cache_us double"
        ).select(
            *(v.alias(k) for k, v in lit.items()),
            "*",
            F.lit(start_us).cast("long").alias("interval_start_us"),
            F.lit(now_us).cast("long").alias("written_at_us"),
        )
        delta.merge_new(wdf, TOPK_WINDOWS, settings.lake_root, ("source", "job", "window_id"))
    if results:
        # a list may hold tuples of earlier intervals: look their ts and score up in bronze, reading
        # only the seq range the lists span (Delta skips the other files by their statistics)
        seqs_needed = [t for _, _, t in results]
        lo_seq, hi_seq = min(seqs_needed), max(seqs_needed) + 1
        known = _tuples(
            delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, seq_range=(lo_seq, hi_seq)),
            job,
        )
        rdf = spark.createDataFrame(results, "window_id long, rank long, seq long").join(known, "seq")
        rdf = rdf.select(*(v.alias(k) for k, v in lit.items()), "window_id", "rank", "seq", "ts", "score")
        delta.merge_new(rdf, TOPK_RESULTS, settings.lake_root, ("source", "job", "window_id", "rank"))
    if late:  # late tuples are this interval's own arrivals: their ts and score are at hand
        ldf = spark.createDataFrame(late, "seq long, window_id long, ts long, score double").select(
            *(v.alias(k) for k, v in lit.items()),
            "seq",
            "window_id",
            "ts",
            "score",
            F.lit(start_us).cast("long").alias("interval_start_us"),
        )
        delta.merge_new(ldf, TOPK_LATE, settings.lake_root, ("source", "job", "seq", "window_id"))
    if trace:
        delta.merge_new(
            spark.createDataFrame(trace, TOPK_CACHE.schema),
            TOPK_CACHE,
            settings.lake_root,
            ("source", "job", "at_seq"),
        )
    state_rows = op.state_rows
    check_state_budget(settings, "top-k", source, jid, end_us, state_rows)
    snap_json = json.dumps({"operator": op.snapshot(), "cache": _cache_snapshot(op.cache)})
    state_row = [
        (
            source,
            jid,
            end_us,
            start_us if prev is None else int(prev["interval_start_us"]),
            snap_json,
            arrivals_before + len(seqs),
            float(op.cache.k_min_us),
            now_us,
        )
    ]
    delta.replace_where(
        spark.createDataFrame(state_row, TOPK_STATE.schema),
        TOPK_STATE,
        settings.lake_root,
        {"source": source, "job": jid, "as_of_us": end_us},
    )
    prune_snapshots(spark, settings, TOPK_STATE, (), source, jid, keep_snapshots)
    return IntervalSummary(
        source,
        jid,
        start_us,
        end_us,
        len(seqs),
        unscored,
        len(windows),
        len(late),
        len(trace),
        float(op.cache.k_min_us),
        op.candidate_count,
        time.monotonic() - t0,
        state_rows,
    )


def _cache_snapshot(cache: CachePolicy) -> dict[str, Any] | None:
    return cache.snapshot() if isinstance(cache, CacheDurationController) else None


def last_processed(spark: SparkSession, settings: Settings, source: str, job: TopKJob) -> int | None:
    """The end of the newest interval the job has processed (None before its first run)."""
    from outoforder.io.tables import TOPK_STATE

    return intervals.last_processed(spark, settings, TOPK_STATE, source, job_id(job))


def pending_span(
    spark: SparkSession, settings: Settings, source: str, job: TopKJob
) -> tuple[int, int] | None:
    """The arrivals the job has still to process (None: none)."""
    return intervals.pending_span(spark, settings, source, last_processed(spark, settings, source, job))


def window_accuracy(spark: SparkSession, settings: Settings, source: str, job: TopKJob) -> DataFrame:
    """Per window of bronze up to the last emitted one: emissions, all late, hit rate, closed.

    The exact top-k comes from :func:`outoforder.spark.topk.window_topk` over the job's bronze rows.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, TOPK_LATE, TOPK_RESULTS, TOPK_STATE, TOPK_WINDOWS
    from outoforder.spark.topk import window_topk

    jid = job_id(job)
    for t in (TOPK_STATE, TOPK_WINDOWS, TOPK_RESULTS, TOPK_LATE):
        if not delta.exists(spark, t, settings.lake_root):
            msg = f"the top-k stream has not run yet (no {t.name} under {settings.lake_root})"
            raise QualityError(msg)
    mine = where_job(source, jid)
    state = (
        delta.read(spark, TOPK_STATE, settings.lake_root)
        .where(mine)
        .orderBy(F.col("as_of_us").desc())
        .first()
    )
    emitted = delta.read(spark, TOPK_WINDOWS, settings.lake_root).where(mine)
    top = emitted.agg(F.max("window_id")).first()
    if state is None or top is None or top[0] is None:
        msg = f"{source}, job {jid}"
        raise NothingYet(msg)
    progress = json.loads(state["snapshot"])["operator"]["progress"]
    bronze = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == source)
    tuples = _tuples(bronze, job).where(F.col("score").isNotNull())
    truth = window_topk(tuples, job.windows(), job.k).where(F.col("window_id") <= top[0])
    got = delta.read(spark, TOPK_RESULTS, settings.lake_root).where(mine).select("window_id", "seq")
    hits = (
        truth.join(got.withColumn("hit", F.lit(1)), ["window_id", "seq"], "left")
        .groupBy("window_id")
        .agg((F.sum(F.coalesce("hit", F.lit(0))) / F.count("*")).alias("hit_rate"))
    )
    counts = emitted.groupBy("window_id").agg(F.count("*").alias("emissions"))
    from outoforder.spark.windows import memberships

    members = tuples.select("seq", F.explode(memberships(tuples, job.windows())).alias("window_id"))
    late = delta.read(spark, TOPK_LATE, settings.lake_root).where(mine).select("seq", "window_id")
    all_late = (
        members.where(F.col("window_id") <= top[0])
        .join(late.withColumn("was_late", F.lit(True)), ["seq", "window_id"], "left")
        .groupBy("window_id")
        .agg(F.min(F.coalesce("was_late", F.lit(False))).alias("all_late"))
    )
    end = F.col("window_id") * job.slide_us + job.window_us
    return (
        all_late.join(hits, "window_id", "left")
        .join(counts, "window_id", "left")
        .select(
            "window_id",
            F.coalesce("emissions", F.lit(0)).alias("emissions"),
            "all_late",
            (F.coalesce("emissions", F.lit(0)) == 1).alias("emitted_once"),
            ((F.coalesce("emissions", F.lit(0)) == 1) | F.col("all_late")).alias("accounted"),
            "hit_rate",
            (end + job.horizon_us <= F.lit(progress)).alias("closed"),
        )
    )


@retry_on_conflict
def validate(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: TopKJob,
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[SuiteResult]:
    """GX: every window emitted once (or all its tuples late); closed windows' accuracy >= ε_min.

    Before the first emission there is nothing to check, and no accuracy verdict before the first
    window closes: both are reported, neither fails. ``fail`` None follows ``quality.on_violation``.
    """
    from pyspark.sql import functions as F

    from outoforder.quality.checkpoints import conclude, run_checkpoint
    from outoforder.quality.measures import record_measures

    try:
        judged = window_accuracy(spark, settings, source, job).localCheckpoint()
    except NothingYet as e:
        print(f"[quality] no top-k window emitted yet ({e}): nothing to check", flush=True)
        return []
    closed = judged.where("closed")
    n_all, n_closed = judged.count(), closed.count()
    frames = {"topk_completeness": judged}
    if n_closed:  # the mean of no window is undefined; before the first closes there is no verdict
        frames["topk_accuracy"] = closed
    jid = job_id(job)
    record_measures(
        spark, settings, source, jid, "topk_hit_rate",
        [
            (int(r[0]), int(r[0]) * job.slide_us, int(r[0]) * job.slide_us + job.window_us,
             None if r[1] is None else float(r[1]), float(job.eps_min),
             r[1] is not None and float(r[1]) >= job.eps_min)
            for r in closed.select("window_id", "hit_rate").collect()
        ],
    )  # fmt: skip
    suites = run_checkpoint(
        settings, "topk", frames, source=source, job=jid, run_name=run_name, eps_min=job.eps_min
    )
    mean = closed.agg(F.avg("hit_rate")).first()
    acc = "no closed window" if mean is None or mean[0] is None else f"accuracy {mean[0]:.4f}"
    what = f"top-{job.k} {job_id(job)} of {source}: {n_all} windows, {n_closed} closed, {acc}"
    print(f"[validate-topk] {what} (ε_min {job.eps_min})", flush=True)
    conclude(suites, what, settings.quality.fails(fail))
    return suites
