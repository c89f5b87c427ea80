"""The stream join as a pipeline: one arrival-time interval per run, state carried in Delta.

Three stages, each idempotent for its interval (DAGs ``join_stream`` and ``join_adapt``):

``join-stream`` (:func:`run_interval`) processes the bronze arrivals of ``[start, end)`` (by
``arrival_ts``) with QJoin's Spark twin (:func:`outoforder.spark.joins.qjoin_batch`):

1. the operator state *as of* ``start`` (stream maxima, horizons, buffered tuples) is read from
   ``silver/join_state`` and ``silver/join_buffer``. A run that starts where no state is leaves
   nothing out: it is the first interval (no state at all), or it fails with a message naming the
   interval that must run first;
2. the retention in force is the newest row of ``silver/join_params`` valid from ``start`` or
   earlier (written by ``join-adapt``), or the initial retention;
3. result pairs are MERGEd into ``gold/join_results`` on (source, job, r_seq, s_seq) with the
   interval, the retention and the parameter version that produced them, so a re-run adds nothing;
4. the state as of ``end`` is written (replacing any earlier write of the same snapshot). Results go
   first: a crash in between re-runs the interval from the state as of ``start`` and finds its pairs
   already there. Snapshots older than ``keep_snapshots`` intervals are removed.

``join-adapt`` (:func:`adapt`) looks at the history up to ``until``: the exact join of bronze (the
truth) and the pairs the stream produced, and writes the retention for the next intervals with the
statistics it came from (either estimator of :mod:`outoforder.core.joins.adaptation`).

``validate-join`` (:func:`validate`) computes the recall of every closed period against the exact
join, writes it to ``gold/join_metrics`` (method ``stream:<job>``) and runs Great Expectations:
no duplicate result pairs, every closed period's recall >= Q_user. A violation fails the task, or is
only reported with ``on_violation="warn"``.

A *job* is one query and target; its id is a digest of them, so two joins of one source (say two
targets) keep separate state and results.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from outoforder.config import Settings
from outoforder.core.joins.adaptation import decide
from outoforder.core.joins.metrics import period_recall
from outoforder.core.joins.progress import joint_progress
from outoforder.core.joins.query import JoinInput, PairArray, exact_join
from outoforder.errors import InputError, StateError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages import intervals
from outoforder.stages.intervals import check_state_budget, prune_snapshots, snapshot_before, where_job
from outoforder.stages.join import COST_COLUMNS, JoinJob, input_from_frame

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

INITIAL_PARAMS_VERSION = -1


def job_id(job: JoinJob, estimator: str = "learned") -> str:
    """A short stable id of a join job (query, target, cadence, estimator).

    >>> job_id(JoinJob()) == job_id(JoinJob())
    True
    >>> job_id(JoinJob(q_user=0.9)) == job_id(JoinJob())
    False
    """
    spec = json.dumps({**asdict(job), "estimator": estimator}, sort_keys=True)
    return "qj-" + hashlib.sha256(spec.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class IntervalSummary:
    """What one run of the stream stage did."""

    source: str
    job: str
    start_us: int
    end_us: int
    arrivals: int
    new_pairs: int
    total_pairs: int
    buffered: int
    d_r_us: int
    d_s_us: int
    params_version: int
    seconds: float

    @property
    def state_rows(self) -> int:
        """The buffered tuples: the join's whole state (what stream.state_budget_rows bounds)."""
        return self.buffered

    def line(self) -> str:
        """One progress line."""
        return (
            f"[join-stream] {self.source} [{self.start_us}, {self.end_us}): {self.arrivals:,} arrivals, "
            f"{self.new_pairs:,} new pairs ({self.total_pairs:,} so far), {self.buffered:,} buffered, "
            f"d = ({self.d_r_us / 1000:g}, {self.d_s_us / 1000:g}) ms (params {self.params_version}), "
            f"{self.seconds:.1f} s"
        )


def _arrivals(
    spark: SparkSession, settings: Settings, source: str, job: JoinJob, lo: int, hi: int
) -> DataFrame:
    """Bronze rows of the joined streams with ``lo <= arrival_ts < hi``, as operator tuples."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    df = delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, arrival_ts_range=(lo, hi))
    df = df.where(F.col("stream").isin(*job.r_streams, *job.s_streams))
    key = F.xxhash64("key") if job.predicate == "key" else F.lit(0).cast("long")
    return df.select(
        F.col("arrival_seq").alias("seq"),
        F.when(F.col("stream").isin(*job.r_streams), 0).otherwise(1).cast("long").alias("side"),
        F.col("event_ts").alias("ts"),
        F.coalesce("x", F.lit(0.0)).alias("x"),
        F.coalesce("y", F.lit(0.0)).alias("y"),
        key.alias("key"),
        (F.col("x").isNull() | F.col("y").isNull()).alias("no_location"),
    )


def _params_in_force(
    spark: SparkSession, settings: Settings, source: str, job: str, at_us: int
) -> tuple[int, int, int]:
    """(d_r, d_s, version) valid at ``at_us``; the initial retention (0, 0) before any adaptation."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import JOIN_PARAMS

    delta.ensure(spark, JOIN_PARAMS, settings.lake_root)
    row = (
        delta.read(spark, JOIN_PARAMS, settings.lake_root)
        .where(where_job(source, job) & (F.col("valid_from_us") <= at_us))
        .orderBy(F.col("valid_from_us").desc())
        .select("d_r_us", "d_s_us", "valid_from_us")
        .first()
    )
    return (0, 0, INITIAL_PARAMS_VERSION) if row is None else (int(row[0]), int(row[1]), int(row[2]))


def adapted_at(
    spark: SparkSession, settings: Settings, source: str, job: JoinJob, at_us: int, estimator: str = "learned"
) -> bool:
    """Whether an adaptation took effect exactly at ``at_us`` (:func:`adapt` with ``until_us = at_us``)."""
    return _params_in_force(spark, settings, source, job_id(job, estimator), at_us)[2] == at_us


def _snapshot_before(
    spark: SparkSession, settings: Settings, source: str, join: JoinJob, job: str, start_us: int
) -> dict[str, Any] | None:
    """The state row to resume from at ``start_us`` (None = the first interval)."""
    from outoforder.io.tables import JOIN_STATE

    def has_arrivals(lo: int, hi: int) -> bool:
        return bool(_arrivals(spark, settings, source, join, lo, hi).limit(1).count())

    return snapshot_before(spark, settings, JOIN_STATE, source, job, start_us, has_arrivals, "join")


def _merge_pairs(pairs: DataFrame, settings: Settings) -> int:
    """Insert the pairs not yet in ``gold/join_results``; the MERGE reads only the files of their seqs."""
    from outoforder.io import delta
    from outoforder.io.tables import JOIN_RESULTS

    keys = ("source", "job", "r_seq", "s_seq")
    return delta.merge_new(pairs, JOIN_RESULTS, settings.lake_root, keys, prune=("r_seq", "s_seq"))


@retry_on_conflict
def run_interval(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    start_us: int,
    end_us: int,
    estimator: str = "learned",
    keep_snapshots: int = 48,
) -> IntervalSummary:
    """Process the arrivals of ``[start_us, end_us)``; idempotent (see the module docstring)."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import JOIN_BUFFER, JOIN_RESULTS, JOIN_STATE
    from outoforder.spark.joins import TUPLE_COLS, QJoinState, qjoin_batch

    if end_us <= start_us:
        msg = f"empty interval [{start_us}, {end_us})"
        raise InputError(msg)
    t0 = time.monotonic()
    jid = job_id(job, estimator)
    for t in (JOIN_STATE, JOIN_BUFFER, JOIN_RESULTS):
        delta.ensure(spark, t, settings.lake_root)
    prev = _snapshot_before(spark, settings, source, job, jid, start_us)
    if prev is None:
        state = QJoinState.empty(spark)
        arrivals_before = pairs_before = 0
    else:
        buffer = (
            delta.read(spark, JOIN_BUFFER, settings.lake_root)
            .where(where_job(source, jid) & (F.col("as_of_us") == prev["as_of_us"]))
            .select(*TUPLE_COLS)
        )
        state = QJoinState(prev["m_r"], prev["m_s"], prev["h_r"], prev["h_s"], buffer)
        arrivals_before, pairs_before = int(prev["arrivals"]), int(prev["pairs"])
    d_r, d_s, version = _params_in_force(spark, settings, source, jid, start_us)

    batch = _arrivals(spark, settings, source, job, start_us, end_us).localCheckpoint()
    if job.predicate == "distance":
        missing = batch.where("no_location").count()
        if missing:
            msg = (
                f"{missing} arrivals of {source} in [{start_us}, {end_us}) have no x/y: "
                "a distance join needs them"
            )
            raise InputError(msg)
    n = batch.count()
    batch = (
        batch.drop("no_location")
        .withColumn("d_r", F.lit(d_r).cast("long"))
        .withColumn("d_s", F.lit(d_s).cast("long"))
    )
    pairs, new_state = qjoin_batch(batch, state, job.query())
    now_us = time.time_ns() // 1000
    results = pairs.select(
        F.lit(source).alias("source"),
        F.lit(jid).alias("job"),
        "r_seq",
        "s_seq",
        "r_ts",
        "s_ts",
        F.col("emitted_at").alias("emitted_at_seq"),
        F.lit("stream").alias("produced_by"),
        F.lit(start_us).cast("long").alias("interval_start_us"),
        F.lit(end_us).cast("long").alias("interval_end_us"),
        F.lit(d_r).cast("long").alias("d_r_us"),
        F.lit(d_s).cast("long").alias("d_s_us"),
        F.lit(version).cast("long").alias("params_version"),
        F.lit(now_us).cast("long").alias("written_at_us"),
    ).localCheckpoint()
    produced = results.count()
    new = _merge_pairs(results, settings)
    buffered = new_state.buffer.count()
    check_state_budget(settings, "stream join", source, jid, end_us, buffered)
    snap: dict[str, str | int] = {"source": source, "job": jid, "as_of_us": end_us}
    delta.replace_where(
        new_state.buffer.select(
            F.lit(source).alias("source"),
            F.lit(jid).alias("job"),
            F.lit(end_us).cast("long").alias("as_of_us"),
            *TUPLE_COLS,
        ),
        JOIN_BUFFER,
        settings.lake_root,
        snap,
    )
    state_row = [
        (
            source,
            jid,
            end_us,
            start_us if prev is None else int(prev["interval_start_us"]),
            new_state.m_r,
            new_state.m_s,
            new_state.h_r,
            new_state.h_s,
            arrivals_before + n,
            pairs_before + produced,
            now_us,
        )
    ]
    delta.replace_where(
        spark.createDataFrame(state_row, JOIN_STATE.schema), JOIN_STATE, settings.lake_root, snap
    )
    prune_snapshots(spark, settings, JOIN_STATE, (JOIN_BUFFER,), source, jid, keep_snapshots)
    return IntervalSummary(
        source,
        jid,
        start_us,
        end_us,
        n,
        new,
        pairs_before + produced,
        buffered,
        d_r,
        d_s,
        version,
        time.monotonic() - t0,
    )


def run_with_adaptation(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    steps: list[tuple[int, int]],
    every_us: int,
    estimator: str = "learned",
) -> None:
    """Run the intervals ``steps`` in order; adapt the retention before those at an adaptation time.

    Adaptation times are multiples of ``every_us`` after the job's first interval (1: every
    interval start but the job's first; 0: never).

    Adapting *before* the interval, unless it was done already, makes a resumed run adapt at the
    same times as one that never stopped: a run killed between an interval's commits and the
    adaptation after it used to resume past that time with the older retention (found by the
    reliability run, docs/reliability.md).
    """
    if not steps:
        return
    origin = first_start(spark, settings, source, job, estimator) if every_us else None
    anchor = steps[0][0] if origin is None else origin
    for lo, hi in steps:
        due = every_us > 0 and lo > anchor and (lo - anchor) % every_us == 0
        if due and not adapted_at(spark, settings, source, job, lo, estimator):
            adapt(spark, settings, source, job, lo, estimator)
        print(run_interval(spark, settings, source, job, lo, hi, estimator).line(), flush=True)


def last_processed(
    spark: SparkSession, settings: Settings, source: str, job: JoinJob, estimator: str = "learned"
) -> int | None:
    """The end of the newest interval the job has processed (None before its first run)."""
    from outoforder.io.tables import JOIN_STATE

    return intervals.last_processed(spark, settings, JOIN_STATE, source, job_id(job, estimator))


def first_start(
    spark: SparkSession, settings: Settings, source: str, job: JoinJob, estimator: str = "learned"
) -> int | None:
    """The start of the job's first interval (every state row carries it), or None before its first run."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import JOIN_STATE

    delta.ensure(spark, JOIN_STATE, settings.lake_root)
    row = (
        delta.read(spark, JOIN_STATE, settings.lake_root)
        .where(where_job(source, job_id(job, estimator)))
        .agg(F.min("interval_start_us"))
        .first()
    )
    return None if row is None or row[0] is None else int(row[0])


def pending_span(
    spark: SparkSession, settings: Settings, source: str, job: JoinJob, estimator: str = "learned"
) -> tuple[int, int] | None:
    """The arrivals still to join: [resume point, newest arrival + 1), or None when there are none."""
    return intervals.pending_span(
        spark, settings, source, last_processed(spark, settings, source, job, estimator)
    )


def _history(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    jid: str,
    until_us: int,
    span_us: int | None = None,
) -> pd.DataFrame:
    """The arrivals the job has seen before ``until_us``, in arrival order.

    All of them since its first interval, or only the last ``span_us`` of arrival time.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, JOIN_STATE

    delta.ensure(spark, JOIN_STATE, settings.lake_root)
    first = (
        delta.read(spark, JOIN_STATE, settings.lake_root)
        .where(where_job(source, jid))
        .agg(F.min("interval_start_us"))
        .first()
    )
    if first is None or first[0] is None:
        msg = f"the stream join of {source} ({jid}) has not run yet: nothing to adapt or check"
        raise StateError(msg)
    return (
        delta.read_arrivals(
            spark,
            BRONZE,
            settings.lake_root,
            source=source,
            arrival_ts_range=(max(int(first[0]), until_us - (span_us or until_us)), until_us),
        )
        .where(F.col("stream").isin(*job.r_streams, *job.s_streams))
        .select("arrival_seq", "stream", "event_ts", "x", "y", "key")
        .orderBy("arrival_seq")
        .toPandas()
    )


def _produced_mask(
    spark: SparkSession,
    settings: Settings,
    source: str,
    jid: str,
    seqs: npt.NDArray[np.int64],
    truth: PairArray,
) -> npt.NDArray[np.bool_]:
    """Which true pairs (arrival indices) the stream stage produced."""
    from outoforder.io import delta
    from outoforder.io.tables import JOIN_RESULTS

    got = (
        delta.read(spark, JOIN_RESULTS, settings.lake_root)
        .where(where_job(source, jid))
        .select("r_seq", "s_seq")
        .toPandas()
    )
    if truth.size == 0:
        return np.zeros(0, dtype=bool)
    base = int(seqs.size) + 1
    pos_r = np.searchsorted(seqs, got["r_seq"].to_numpy(np.int64))
    pos_s = np.searchsorted(seqs, got["s_seq"].to_numpy(np.int64))
    inside = (pos_r < seqs.size) & (pos_s < seqs.size)
    inside[inside] &= (seqs[pos_r[inside]] == got["r_seq"].to_numpy()[inside]) & (
        seqs[pos_s[inside]] == got["s_seq"].to_numpy()[inside]
    )
    codes = pos_r[inside] * base + pos_s[inside]
    return np.isin(truth[:, 0] * base + truth[:, 1], codes)


def _judged_history(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    jid: str,
    until_us: int,
    span_us: int | None = None,
) -> tuple[JoinInput, PairArray, npt.NDArray[np.bool_], npt.NDArray[np.int64]] | None:
    """The history: a join input, its exact join, the true pairs the stream produced, arrival_seqs."""
    pdf = _history(spark, settings, source, job, jid, until_us, span_us)
    if pdf.empty:
        return None
    inp = input_from_frame(pdf, job)
    truth = exact_join(inp, job.query())
    seqs = pdf["arrival_seq"].to_numpy(np.int64)
    produced = _produced_mask(spark, settings, source, jid, seqs, truth)
    return inp, truth, produced, seqs


@retry_on_conflict
def adapt(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    estimator: str = "learned",
) -> dict[str, Any]:
    """Choose the retention in force from ``until_us`` on; store it with its statistics."""
    from outoforder.io import delta
    from outoforder.io.tables import JOIN_PARAMS

    jid = job_id(job, estimator)
    # the controller looks at the last period (eq. 3) and learns from pairs up to a period old:
    # three periods of arrivals bound the work however long the job has run
    seen = _judged_history(spark, settings, source, job, jid, until_us, span_us=3 * job.period_us)
    if seen is None:
        msg = f"no arrivals of {source} before {until_us}: nothing to adapt on"
        raise InputError(msg)
    inp, truth, produced, _ = seen
    step = decide(inp, job.query(), job.adaptation(estimator), produced, truth)
    row = {
        "source": source,
        "job": jid,
        "valid_from_us": until_us,
        "progress_us": step.progress_us,
        "estimator": estimator,
        "q_user": job.q_user,
        "q_l": step.q_l,
        "d_r_us": step.d_r_us,
        "d_s_us": step.d_s_us,
        "estimated_q": step.estimated_q,
        "stats_json": json.dumps(step.stats, sort_keys=True),
        "computed_at_us": time.time_ns() // 1000,
    }
    df = spark.createDataFrame([tuple(row[f.name] for f in JOIN_PARAMS.schema.fields)], JOIN_PARAMS.schema)
    delta.replace_where(
        df, JOIN_PARAMS, settings.lake_root, {"source": source, "job": jid, "valid_from_us": until_us}
    )
    print(
        f"[join-adapt] {source} ({jid}) from {until_us}: Q_L = {step.q_l:.4f}, d = "
        f"({step.d_r_us / 1000:g}, {step.d_s_us / 1000:g}) ms, estimated recall {step.estimated_q:.4f}; "
        f"{len(inp):,} arrivals, {truth.shape[0]:,} true pairs, {int(produced.sum()):,} produced",
        flush=True,
    )
    return row


@retry_on_conflict
def repair(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    estimator: str = "learned",
    span_us: int | None = None,
) -> dict[str, int]:
    """Add the true pairs the stream missed among the arrivals before ``until_us``; idempotent.

    The exact join of the history (all of it, or the last ``span_us`` of arrival time) is compared
    with ``gold/join_results``; every missing pair is MERGEd with ``produced_by = "repair"``, the
    repair's horizon as its interval and -1 for the retention and parameter version, so join
    recall becomes exact once the late tuples are in bronze.
    """
    from outoforder.io.tables import JOIN_RESULTS

    jid = job_id(job, estimator)
    seen = _judged_history(spark, settings, source, job, jid, until_us, span_us)
    if seen is None:
        return {"true_pairs": 0, "missing": 0, "added": 0}
    inp, truth, produced, seqs = seen
    missing = truth[~produced]
    now_us = time.time_ns() // 1000
    rows = [
        (
            source,
            jid,
            int(seqs[r]),
            int(seqs[s_]),
            int(inp.ts[r]),
            int(inp.ts[s_]),
            int(max(seqs[r], seqs[s_])),  # the arrival that completed the pair
            "repair",
            until_us,
            until_us,
            -1,
            -1,
            -1,
            now_us,
        )
        for r, s_ in missing.tolist()
    ]
    added = 0
    if rows:
        frame = spark.createDataFrame(rows, JOIN_RESULTS.schema)
        added = _merge_pairs(frame, settings)
    print(
        f"[join-repair] {source} ({jid}): {len(truth):,} true pairs before {until_us}, "
        f"{len(missing):,} missing from the stream's results, {added:,} added",
        flush=True,
    )
    return {"true_pairs": len(truth), "missing": len(missing), "added": added}


def period_quality(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    estimator: str = "learned",
) -> pd.DataFrame:
    """Recall per closed period of the stream's results against the exact join of bronze.

    A period is *closed* once the joint progress at ``until_us`` is one full period past its end
    (by then the late tuples of typical disorder have arrived; later ones count when re-checked).
    """
    import pandas as pd

    jid = job_id(job, estimator)
    seen = _judged_history(spark, settings, source, job, jid, until_us)
    cols = ["period", "start_us", "true_pairs", "produced_pairs", "recall", "met"]
    if seen is None:
        return pd.DataFrame(columns=cols)
    inp, truth, produced, _ = seen
    periods = period_recall(inp, truth, truth[produced], job.period_us, job.q_user)
    t_end = int(joint_progress(inp)[-1])
    closed = [p for p in periods if p.start_us + 2 * job.period_us <= t_end]
    return pd.DataFrame([asdict(p) for p in closed], columns=cols)


@retry_on_conflict
def validate(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    estimator: str = "learned",
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[Any]:
    """Store per-period recall and run the GX checks (duplicates, recall per closed period).

    ``fail`` None follows ``quality.on_violation``.
    """
    from outoforder.io import delta
    from outoforder.io.tables import JOIN_METRICS, JOIN_RESULTS
    from outoforder.quality.checkpoints import conclude, run_checkpoint
    from outoforder.quality.measures import record_measures

    jid = job_id(job, estimator)
    quality = period_quality(spark, settings, source, job, until_us, estimator)
    method = f"stream:{jid}"
    rows = [
        (
            source,
            method,
            int(r["period"]),
            int(r["start_us"]),
            int(r["true_pairs"]),
            int(r["produced_pairs"]),
            float(r["recall"]),
            bool(r["met"]),
            float(job.q_user),
            *(None for _ in COST_COLUMNS),  # buffered tuples per interval are in silver/join_state
        )
        for r in quality.to_dict("records")
    ]
    metrics = spark.createDataFrame(rows, JOIN_METRICS.schema)
    delta.replace_where(metrics, JOIN_METRICS, settings.lake_root, {"source": source, "method": method})
    record_measures(
        spark, settings, source, jid, "join_recall",
        [
            (int(r["period"]), int(r["start_us"]), int(r["start_us"]) + job.period_us, float(r["recall"]),
             float(job.q_user), bool(r["met"]))
            for r in quality.to_dict("records")
        ],
    )  # fmt: skip
    results = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(where_job(source, jid))
    suites = run_checkpoint(
        settings, "join", {"join_results": results, "join_recall": metrics},
        source=source, job=jid, run_name=run_name, q_user=job.q_user,
    )  # fmt: skip
    met = int(quality["met"].sum()) if len(quality) else 0
    print(
        f"[validate-join] {source} ({jid}): {len(quality)} closed periods, {met} meet Q_user = {job.q_user}"
        + (
            f", recall min {quality['recall'].min():.4f} mean {quality['recall'].mean():.4f}"
            if len(quality)
            else ""
        ),
        flush=True,
    )
    conclude(suites, "stream join", settings.quality.fails(fail))
    return suites
