"""Scale: the whole pipeline over a replay the size of the DEBS 2013 full game, on local[2].

The replay is synthetic soccer play at the real sensor rates (one ball at 2000 Hz, 44 leg sensors
at 200 Hz: about 10,800 tuples per second of play) delayed by the ``hpm_game1`` preset (calibrated
on the HPM paper's game), ``TUPLES`` tuples in all, written as plain CSV parts of one minute of
arrivals each (:func:`~outoforder.stages.ingest.replay.write_replay_parts`). Then, each part of
the pipeline in a process of its own, as Airflow starts a stage:

1. ``ingest``: every part into bronze (one ingest over all the files);
2. ``stats``: the source's disorder statistics;
3. ``join``: the stream join (the long runs' query, :func:`~benchmarks.longrun.narrow_join`:
   about one result pair per tuple), one pass per 60 s of arrivals with its retention adapted every L
   inside the pass, each pass validated over what closed in it
   (``validate-join --since --until``, as the ``join_stream`` DAG does);
4. ``aggregate``: HPM, a pass per 60 s of arrivals with the Γ-rule repair after each (``late_repair``)
   and ``validate-aggregate`` over each pass;
5. ``topk``: the continuous top-k, a pass per 60 s, with ``validate-topk`` over each pass;
6. ``theta``: the θ-join backfill (the main job's job) in 60 s event-time slices, each checked,
   over the first ``THETA_SPAN_S`` seconds of play (the ``theta_backfill`` DAG's runs); and
   ``theta-day``: the same backfill over the whole replay in one run (a day's interval of the
   backfill CLI), checked on ``THETA_DAY_SAMPLE`` windows against DuckDB;
7. ``report``: the data-quality report;
8. ``sss-join`` and ``sss-aggregate``: Spark Structured Streaming's own stream-stream join and
   windowed aggregation of the same queries over bronze, one part per micro-batch, as the
   throughput anchor (they drop what is behind their watermark and judge nothing).

``spark.driver.maxResultSize`` is 64m: a stage that collected the history would fail the run.
The Python driver's and the JVM's memory (PSS) are sampled every 0.2 s; Spark's own executor
metrics (tasks, task time) are read from its REST API at the end of each part, beside the
Python driver's CPU time: the work ran as tasks, not in the driver.

``bash infra/bench.sh scale`` runs the full size; ``--quick`` a small replay for a smoke run.
``OOO_SCALE_TUPLES`` sets the size, ``OOO_SCALE_PARTS`` runs some parts on the lake of an earlier
run and keeps the other parts' figures, ``OOO_SPARK_MASTER`` runs it on a cluster (label it with
``OOO_SCALE_LABEL``). Results: docs/benchmarks/scale.json, .md and .png.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import (
    DEFAULT_OUT,
    SAMPLE_S,
    MemorySampler,
    log,
    machine,
    markdown_table,
    run_command,
    source_commit,
    spark_rest,
    stage_command,
    write_json,
)
from benchmarks.longrun import narrow_join
from benchmarks.scaling import start_cluster
from outoforder.config import REPO_ROOT, Settings, load_settings
from outoforder.errors import StateError
from outoforder.stages.context import StageContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TUPLES = 49_600_000  # the DEBS 2013 full game (the seeds' dataset)
TUPLES_PER_PLAY_S = 10_800  # the synthetic game's rate, all sensors
PRESET = "hpm_game1"
SEED = 7
INTERVAL_S = 60.0  # the stream DAGs' schedule
THETA_SPAN_S = 600.0
THETA_DAY_SAMPLE = 3  # windows of the day's run recounted by DuckDB in its check
MAX_RESULT = "64m"
SSS_WATERMARK_S = 1.0  # the anchor's watermark delay: late tuples' mean delay in the replay is 34 ms
PARTS = (
    "ingest", "stats", "join", "aggregate", "topk", "theta", "theta-day", "report",
    "sss-join", "sss-aggregate",
)  # fmt: skip
STREAM_PARTS = ("join", "aggregate", "topk")
SSS_PARTS = ("sss-join", "sss-aggregate")  # Structured Streaming's own operators: the throughput anchor


def _settings(work: Path) -> Settings:
    env = {**os.environ, "OOO_LAKE_ROOT": str(work / "lake")}
    return load_settings(work / "scale.toml", env=env)


def _config(work: Path) -> Path:
    """The run's settings file: warnings instead of failures, the driver's result limit, Spark's UI on."""
    path = work / "scale.toml"
    path.write_text(
        '[quality]\non_violation = "warn"\n'
        f'[spark.conf]\n"spark.driver.maxResultSize" = "{MAX_RESULT}"\n"spark.ui.enabled" = "true"\n'
    )
    return path


def executor_metrics(spark: SparkSession) -> dict[str, Any]:
    """Spark's own totals per executor (tasks, task time, GC, input, shuffle) from its REST API."""
    out = {}
    for e in spark_rest(spark, "allexecutors") or []:
        out[e["id"]] = {
            "tasks": e["totalTasks"],
            "task_s": round(e["totalDuration"] / 1000, 1),
            "gc_s": round(e["totalGCTime"] / 1000, 1),
            "input_mb": round(e["totalInputBytes"] / 2**20),
            "shuffle_read_mb": round(e["totalShuffleRead"] / 2**20),
            "shuffle_write_mb": round(e["totalShuffleWrite"] / 2**20),
            "cores": e["totalCores"],
        }
    return out


def input_bytes(spark: SparkSession) -> int:
    """Bytes every executor has read from files so far (Spark's own input metric)."""
    return sum(e["totalInputBytes"] for e in spark_rest(spark, "allexecutors") or [])


def heaviest_stages(spark: SparkSession, top: int = 12) -> list[dict[str, Any]]:
    """Spark's stages grouped by their call site, the ``top`` heaviest by task time: where the time went.

    Spark's UI keeps the newest ``spark.ui.retainedStages`` (1000) stages, so over a long part these
    are the heaviest of its last stages.
    """
    by: dict[str, dict[str, Any]] = {}
    for st in spark_rest(spark, "stages") or []:
        g = by.setdefault(
            st["name"], {"name": st["name"], "stages": 0, "tasks": 0, "task_s": 0.0, "input_mb": 0.0}
        )
        g["stages"] += 1
        g["tasks"] += st["numTasks"]
        g["task_s"] += st["executorRunTime"] / 1000
        g["input_mb"] += st["inputBytes"] / 2**20
    rows = sorted(by.values(), key=lambda g: -g["task_s"])[:top]
    return [g | {"task_s": round(g["task_s"], 1), "input_mb": round(g["input_mb"])} for g in rows]


def _driver_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)  # this Python process only, not the JVM
    return ru.ru_utime + ru.ru_stime


def _peak(sampler: MemorySampler) -> dict[str, int]:
    driver, others, _ = sampler.peak()
    return {"peak_pss_driver_mb": driver >> 20, "peak_pss_jvm_workers_mb": others >> 20}


def _interval_loop(
    spark: SparkSession,
    settings: Settings,
    part: str,
    source: str,
    sampler: MemorySampler,
) -> list[dict[str, Any]]:
    """A stream part over every arrival interval: the stage, then the check of what closed in it."""
    from outoforder.stages.aggregate import validate as agg_check
    from outoforder.stages.aggregate.spec import AggJob
    from outoforder.stages.aggregate.stream import AggregateStream
    from outoforder.stages.join import validate as join_check
    from outoforder.stages.join.spec import JoinJob
    from outoforder.stages.join.stream import JoinStream
    from outoforder.stages.topk import validate as topk_check
    from outoforder.stages.topk.spec import TopKJob
    from outoforder.stages.topk.stream import TopKStream

    stage: Any
    check: Callable[[int, int], Any]
    for t in part_tables(part):  # a rerun of a part on an earlier lake starts afresh
        shutil.rmtree(t.path(settings.lake_root), ignore_errors=True)
    if part == "join":
        # OOO_SCALE_JOIN=default: the join_stream DAG's default query (0.5 s, 2 m: ten pairs a tuple)
        join = JoinJob() if os.environ.get("OOO_SCALE_JOIN") == "default" else narrow_join()
        stage = JoinStream(StageContext.of(spark, settings, source, join))

        def check(lo: int, hi: int) -> Any:
            return join_check.validate_join(
                StageContext.of(spark, settings, source, join), hi, fail=False, since_us=lo
            )

    elif part == "aggregate":
        agg = AggJob()
        stage = AggregateStream(StageContext.of(spark, settings, source, agg), repair_each=True)

        def check(lo: int, hi: int) -> Any:
            return agg_check.validate_aggregate(
                StageContext.of(spark, settings, source, agg), fail=False, until_us=hi, since_us=lo
            )

    else:
        topk = TopKJob()
        stage = TopKStream(StageContext.of(spark, settings, source, topk))

        def check(lo: int, hi: int) -> Any:
            return topk_check.validate_topk(
                StageContext.of(spark, settings, source, topk), fail=False, until_us=hi, since_us=lo
            )

    # its tables were removed: from the first arrival
    span: tuple[int, int] | None = stage.pending()
    if span is None:
        msg = f"no arrivals of {source} in {settings.lake_root}"
        raise StateError(msg)
    step = round(INTERVAL_S * 1e6)
    records: list[dict[str, Any]] = []
    done = 0
    ends = [*range(span[0] + step, span[1], step), span[1]]  # a run per step, as the scheduler's
    for i, (lo, hi) in enumerate(zip([span[0], *ends[:-1]], ends, strict=True)):
        sampler.reset()
        read0 = input_bytes(spark)
        t0 = time.monotonic()
        # one pass per run, adapting inside it (the aggregates repair after it)
        summary = stage.run(lo, hi, catch_up=True)
        if summary is None:  # nothing arrived in it
            continue
        t1 = time.monotonic()
        check(lo, hi)
        t2 = time.monotonic()
        read1 = input_bytes(spark)
        done += summary.arrivals
        rec = {
            "part": part,
            "interval": i,
            "arrivals": summary.arrivals,
            "stage_s": round(t1 - t0, 2),
            "check_s": round(t2 - t1, 2),
            "seconds": round(t2 - t0, 2),
            "full_interval": hi - lo == step,
            "state_rows": int(summary.state_rows),
            "input_mb": round((read1 - read0) / 2**20),
            **_peak(sampler),
        }
        records.append(rec)
        log(
            "scale",
            f"{part} interval {i}: {summary.arrivals:,} tuples, stage {rec['stage_s']:.1f} s + check "
            f"{rec['check_s']:.1f} s, driver {rec['peak_pss_driver_mb']} MB; {done:,} so far",
        )
    return records


def _theta(
    spark: SparkSession, settings: Settings, source: str, sampler: MemorySampler, day: bool = False
) -> list[dict[str, Any]]:
    """The θ backfill in the DAG's 60 s event-time slices over the first ``THETA_SPAN_S`` of play.

    With ``day``: over the whole replay in one run, the interval a daily backfill would cover.
    """
    from outoforder.stages.theta import validate as theta_check
    from outoforder.stages.theta.backfill import event_range, run_interval
    from outoforder.stages.theta.spec import ThetaJob

    job = ThetaJob()  # the main job's query

    lo_ts, hi_ts = event_range(spark, settings, source)
    step = round(INTERVAL_S * 1e6)
    first = lo_ts // step * step
    if day:  # whole minutes up to the last event: windows divide a minute
        slices = [(first, (hi_ts // step + 1) * step)]
    else:
        end = min(first + round(THETA_SPAN_S * 1e6), hi_ts + 1)
        slices = [(lo, lo + step) for lo in range(first, end, step)]
    records = []
    for i, (lo, hi) in enumerate(slices):
        sampler.reset()
        t0 = time.monotonic()
        s = run_interval(StageContext.of(spark, settings, source, job), lo, hi)
        t1 = time.monotonic()
        sample = THETA_DAY_SAMPLE if day else 1
        theta_check.validate_theta(
            StageContext.of(spark, settings, source, job), lo, hi, sample=sample, fail=False
        )
        t2 = time.monotonic()
        rec = {
            "part": "theta-day" if day else "theta",
            "interval": i,
            "covered_s": (hi - lo) / 1e6,
            "windows": s.windows,
            "pairs": s.output_rows,
            "rows_compared": s.rows_compared,
            "stage_s": round(t1 - t0, 2),
            "check_s": round(t2 - t1, 2),
            "seconds": round(t2 - t0, 2),
            "full_interval": not day,
            **_peak(sampler),
        }
        records.append(rec)
        log("scale", f"theta slice {i}: {s.windows} windows, {s.output_rows:,} pairs, {rec['seconds']:.1f} s")
    return records


def _sss(spark: SparkSession, settings: Settings, part: str, source: str, work: Path) -> list[dict[str, Any]]:
    """Structured Streaming's stream-stream join or windowed aggregation over bronze, one file a batch.

    What a Spark user would run instead of the stream stages: bronze read as a Delta stream, one
    part (60 s of arrivals) per micro-batch, a watermark of ``SSS_WATERMARK_S``, the same query as
    the stage (the narrow join, with event-time slots in its equality; the aggregates' default
    windows) and its output appended to a Delta table. Rows behind the watermark are dropped: this
    is an anchor for throughput, not for recall. One record per micro-batch, from the query's own
    progress reports.
    """
    from pyspark.sql import functions as F

    from benchmarks.sss_agg import windowed
    from benchmarks.sss_join import join_streams
    from outoforder.io.tables import BRONZE
    from outoforder.stages.aggregate.spec import AggJob

    out, ckpt = work / "sss" / part, work / "sss" / f"{part}.checkpoint"
    for p in (out, ckpt):
        shutil.rmtree(p, ignore_errors=True)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")
    watermark = round(SSS_WATERMARK_S * 1e6)

    def bronze(streams: tuple[str, ...]) -> DataFrame:
        df = (
            spark.readStream.format("delta")
            .option("maxFilesPerTrigger", 1)
            .load(BRONZE.path(settings.lake_root))
            .where(F.col("source") == source)
        )
        if streams:
            df = df.where(F.col("stream").isin(*streams))
        return df.select(
            F.col("arrival_seq").alias("seq"), F.col("event_ts").alias("ts_us"), "x", "y",
            F.xxhash64("key").alias("key"), F.col("value").alias("v"),
        )  # fmt: skip

    if part == "sss-join":
        job = narrow_join()
        result = join_streams(
            bronze(job.r_streams), bronze(job.s_streams), job.query(), watermark, slots=True
        )
    else:
        agg = AggJob()
        result = windowed(bronze(agg.streams), agg.query().windows, agg.aggregate, watermark)
    query = (
        result.writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()
    records = []
    for i, prog in enumerate(query.recentProgress):
        seconds = prog["durationMs"].get("triggerExecution", 0) / 1000
        rows = int(prog.get("numInputRows", 0))
        if not rows:
            continue
        state = prog.get("stateOperators") or [{}]
        records.append(
            {
                "part": part, "interval": i, "arrivals": rows, "stage_s": round(seconds, 2), "check_s": 0.0,
                "seconds": round(seconds, 2), "full_interval": True,
                "state_rows": int(sum(op.get("numRowsTotal", 0) for op in state)),
                "dropped_by_watermark": int(sum(op.get("numRowsDroppedByWatermark", 0) for op in state)),
            }
        )  # fmt: skip
        log("scale", f"{part} batch {i}: {rows:,} rows, {seconds:.1f} s")
    return records


def part_tables(part: str) -> tuple[Any, ...]:
    """The tables a stream part writes: its stage's, and those of the stage's adaptation or repair.

    A part rerun on an earlier lake removes them all. Left in place, the earlier run's retention
    rows told the join it had adapted already (so it did not, and its time left the adaptation
    out), and its repair log told the aggregates that every late tuple was repaired (so none was).
    """
    from benchmarks.longrun import stage_tables
    from outoforder.io import tables as T

    companions = {"join": (T.JOIN_PARAMS, T.JOIN_METRICS), "aggregate": (T.AGG_REPAIRS,), "topk": ()}
    return (*stage_tables(f"{part}-stream"), *companions[part])


def _run_part(part: str, work: Path) -> int:
    """Child process: one part of the pipeline; its records, totals and memory to ``<part>.json``."""
    from outoforder.spark.session import get_spark

    settings = _settings(work)
    source = os.environ["OOO_SCALE_SOURCE"]
    sampler = MemorySampler().start()
    t_start = time.monotonic()
    spark = get_spark(settings, app_name=f"outoforder-scale-{part}")
    t0 = time.monotonic()
    cpu0 = _driver_cpu_s()
    records: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        if part == "ingest":
            from outoforder.stages.ingest.files import ingest_files
            from outoforder.stages.ingest.plan import FileSpec

            manifest = json.loads((work / "landing" / "replay.json").read_text())
            specs = [
                FileSpec(str(work / "landing" / n), "soccer_synthetic", source) for n in manifest["parts"]
            ]
            out = ingest_files(spark, settings, specs)
            extra["rows"] = sum(s.accepted for s in out)
            extra["files"] = len(out)
        elif part == "stats":
            from outoforder.stages.stats import source_stats

            extra["stats"] = source_stats(spark, settings, source)
        elif part in STREAM_PARTS:
            records = _interval_loop(spark, settings, part, source, sampler)
        elif part in ("theta", "theta-day"):
            records = _theta(spark, settings, source, sampler, day=part == "theta-day")
        elif part in SSS_PARTS:
            records = _sss(spark, settings, part, source, work)
        else:
            from outoforder.quality.report import build_reports

            extra["reports"] = [str(p) for p in build_reports(spark, settings)]
    finally:
        seconds = time.monotonic() - t0
        cpu = _driver_cpu_s() - cpu0
        metrics = executor_metrics(spark)
        heaviest = heaviest_stages(spark)
        spark.stop()
        sampler.stop()
    total = {
        "part": part,
        "seconds": round(seconds, 1),
        "process_s": round(time.monotonic() - t_start, 1),
        "python_driver_cpu_s": round(cpu, 1),
        "executors": metrics,
        "heaviest_stages": heaviest,
        "peak_pss_driver_mb": max((d for _, d, _ in sampler.trace), default=0) >> 20,
        "peak_pss_jvm_workers_mb": max((o for _, _, o in sampler.trace), default=0) >> 20,
        **extra,
    }
    trace = [
        (round(t, 1), d >> 20, o >> 20) for t, d, o in sampler.trace[:: max(1, round(1 / SAMPLE_S))]
    ]  # one sample a second
    (work / f"{part}.json").write_text(json.dumps({"total": total, "records": records, "trace": trace}))
    return 0


# --- the parent: runs, parts, results ---------------------------------------------------------


def _runs(quick: bool) -> list[tuple[str, str, int]]:
    """(name, label, tuples) of the runs chosen by ``OOO_SCALE_RUNS`` (default: all three)."""
    full = int(os.environ.get("OOO_SCALE_TUPLES", 300_000 if quick else TUPLES))
    every = {
        "full": ("local[2]", full),
        "tenth": ("local[2], a tenth", full // 10),
        "tenth-cluster": ("cluster 2 workers x 1 core, a tenth", full // 10),
    }
    names = [n for n in os.environ.get("OOO_SCALE_RUNS", ",".join(every)).split(",") if n]
    unknown = [n for n in names if n not in every]
    if unknown:
        msg = f"OOO_SCALE_RUNS: unknown run {', '.join(unknown)} (runs: {', '.join(every)})"
        raise StateError(msg)
    return [(n, *every[n]) for n in names]


def _one_run(
    root: Path, name: str, label: str, tuples: int, parts: list[str], quick: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Generate (or reuse) the replay, run the chosen parts as processes; their records and run facts."""
    from outoforder.stages.ingest.replay import write_replay_parts

    seconds = float(-(-tuples // TUPLES_PER_PLAY_S))
    landing = root / f"replay-{seconds:g}s"
    work = root / f"{name}-{seconds:g}s"
    if "ingest" in parts:
        shutil.rmtree(work / "lake", ignore_errors=True)  # a fresh pipeline
    work.mkdir(parents=True, exist_ok=True)
    (work / "landing").unlink(missing_ok=True)  # a link to the replay, shared by runs of one size
    (work / "landing").symlink_to(landing)
    config = _config(work)
    t0 = time.monotonic()
    log("scale", f"{label}: {seconds:g} s of play ({PRESET}, about {tuples:,} tuples) in {landing}")
    replay = write_replay_parts(landing, PRESET, seconds, SEED, part_s=INTERVAL_S)
    generated_s = round(time.monotonic() - t0, 1)
    env = {
        **os.environ,
        "OOO_WORK_DIR": str(work),
        "OOO_REPORTS_DIR": str(work / "reports"),
        "OOO_LAKE_ROOT": str(work / "lake"),
        "OOO_SCALE_SOURCE": replay.source,
        "OOO_SCALE_WORK": str(work),
    }
    cluster = None
    if name.endswith("cluster"):
        cluster = start_cluster(root / "spark-cluster", env, workers=2, cores=1)
        env["OOO_SPARK_MASTER"] = cluster[2]
    records: list[dict[str, Any]] = []
    try:
        for part in parts:
            log("scale", f"{label}: {part} (a process of its own)")
            out = work / f"{part}.json"
            out.unlink(missing_ok=True)
            cmd = [sys.executable, "-m", "benchmarks", "scale"] + (["--quick"] if quick else [])
            with (work / f"{part}.log").open("w") as errors:  # Spark's log: kept for a failure
                done = subprocess.run(
                    cmd, env={**env, "OOO_SCALE_CHILD": part}, stdout=None, stderr=errors, check=False
                )
            if done.returncode == 0 and out.exists():
                got = json.loads(out.read_text())
                records.append(
                    {"run": name, **got["total"], "commit": source_commit(), "intervals": got["records"],
                     "trace": got["trace"]}
                )  # fmt: skip
            else:
                text = (work / f"{part}.log").read_text(errors="replace").splitlines()
                why = [ln for ln in text if ln.startswith(("error", "Traceback")) or "Exception:" in ln]
                failed = f"exit {done.returncode}: {' | '.join(why[-3:])[:800]} (log: {work / part}.log)"
                records.append({"run": name, "part": part, "failed": failed})
                log("scale", f"{label}: {part} failed: {records[-1]['failed'][:600]}")
        sums = run_command(stage_command(config, "checksum", "--json"), env, "checksums")
        line = next(ln for ln in sums.splitlines() if ln.startswith("CHECKSUMS"))
        checksums = dict(json.loads(line[len("CHECKSUMS") :]))
    finally:
        if cluster is not None:
            run_command([*cluster[0], "stop"], cluster[1], "stopping the cluster")
    facts = {
        "label": label,
        "source": replay.source,
        "tuples": replay.tuples,
        "play_s": seconds,
        "replay": replay.report,
        "generated_s": generated_s,
        "master": env.get("OOO_SPARK_MASTER", "local[2]"),
        "checksums": checksums,
        **machine(),
    }
    return records, facts


def summarize(records: list[dict[str, Any]], runs: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per run and part: throughput, its ratio to real time, flatness, memory, executors."""
    rows = []
    for r in records:
        facts = runs[r["run"]]
        # a part rerun on an earlier lake (OOO_SCALE_PARTS) names its own code
        commit = r.get("commit", facts["commit"])
        row: dict[str, Any] = {
            "run": facts["label"],
            "part": r["part"],
            "commit": commit,
            "failed": r.get("failed", ""),
        }
        if "failed" not in r:
            ivs = [i for i in r["intervals"] if i.get("full_interval")]
            rate = facts["tuples"] / facts["play_s"]
            seconds = r["seconds"]
            covered = facts["play_s"]
            if r["intervals"]:  # parts in intervals: their time is the intervals' (stage + check)
                seconds = sum(i["seconds"] for i in r["intervals"])
            if r["part"] in STREAM_PARTS:
                row["check_share"] = round(sum(i["check_s"] for i in r["intervals"]) / seconds, 2)
                stage_s = sum(i["stage_s"] for i in r["intervals"])
                row["x_real_time_stage"] = round(covered / stage_s, 2) if stage_s else None
            elif r["part"] in ("theta", "theta-day"):
                covered = sum(i.get("covered_s", INTERVAL_S) for i in r["intervals"])
            tenth = max(1, len(ivs) // 10)
            first = sum(i["seconds"] for i in ivs[:tenth]) / tenth if ivs else None
            last = sum(i["seconds"] for i in ivs[-tenth:]) / tenth if ivs else None
            tasks = sum(e["tasks"] for e in r["executors"].values())
            task_s = sum(e["task_s"] for e in r["executors"].values())
            row |= {
                "seconds": round(seconds, 1),
                "tuples_per_s": round(covered * rate / seconds) if seconds else None,
                "x_real_time": round(covered / seconds, 2) if seconds else None,
                "first_tenth_s": round(first, 2) if first else None,
                "last_tenth_s": round(last, 2) if last else None,
                "last_vs_first": round(last / first, 2) if first and last else None,
                "peak_pss_driver_mb": r["peak_pss_driver_mb"],
                "peak_pss_jvm_workers_mb": r["peak_pss_jvm_workers_mb"],
                "executor_tasks": tasks,
                "executor_task_s": round(task_s),
                # the cores Spark's tasks kept busy on average (local[2]: at most 2)
                "cores_busy": round(task_s / r["seconds"], 2) if r["seconds"] else None,
                "python_driver_cpu_s": r["python_driver_cpu_s"],
            }
            if r["part"] == "ingest":
                row["tuples_per_s"] = round(r["rows"] / r["seconds"])
        rows.append(row)
    return rows


def plot(records: list[dict[str, Any]], runs: dict[str, Any], out: Path) -> None:
    """Per-interval time of the stream parts (each run), and the driver's memory over each part."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(9, 8))
    for r in records:
        if "failed" in r or r["part"] not in STREAM_PARTS + SSS_PARTS:
            continue
        ivs = r["intervals"]
        label = f"{r['part']} ({runs[r['run']]['label']})"
        axes[0].plot([i["interval"] for i in ivs], [i["seconds"] for i in ivs], label=label, linewidth=1)
    axes[0].axhline(INTERVAL_S / 5, color="red", linestyle="--", label="5x real time")
    axes[0].set(xlabel="arrival interval (60 s)", ylabel="seconds (stage + check)", title="Per interval")
    offset = 0.0
    for r in records:
        if "failed" in r or not r["trace"]:
            continue
        t = [offset + s / 60 for s, _, _ in r["trace"]]
        first = offset == 0.0
        axes[1].plot(
            t, [d for _, d, _ in r["trace"]], color="tab:blue", label="Python driver" if first else None
        )
        axes[1].plot(t, [o for _, _, o in r["trace"]], color="tab:orange", label="JVM" if first else None)
        axes[1].text(offset, 0, f" {r['part']}", fontsize=6, rotation=90, va="bottom")
        offset = t[-1]
    axes[1].axhline(1024, color="red", linestyle="--", label="1 GB")
    axes[1].set(xlabel="minutes (parts one after the other)", ylabel="MB (PSS)", title="Memory")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Run the chosen runs and parts (module docstring); write scale.json, .md and .png."""
    del data_dir, spark_on
    child = os.environ.get("OOO_SCALE_CHILD")
    if child:
        return _run_part(child, Path(os.environ["OOO_SCALE_WORK"]))
    root = REPO_ROOT / ".local" / "bench" / "scale"
    root.mkdir(parents=True, exist_ok=True)
    parts = [p for p in os.environ.get("OOO_SCALE_PARTS", ",".join(PARTS)).split(",") if p]
    if unknown := [p for p in parts if p not in PARTS]:
        msg = f"OOO_SCALE_PARTS: unknown part {', '.join(unknown)} (parts: {', '.join(PARTS)})"
        raise StateError(msg)
    path = out_dir / "scale.json"
    earlier = json.loads(path.read_text()) if path.exists() and not quick else {"meta": {}, "records": []}
    runs: dict[str, Any] = earlier["meta"].get("runs", {})
    chosen = _runs(quick)
    again = {(n, p) for n, _, _ in chosen for p in parts}
    records = [r for r in earlier["records"] if (r["run"], r["part"]) not in again]
    t0 = time.monotonic()
    for name, label, tuples in chosen:
        got, facts = _one_run(root, name, label, tuples, parts, quick)
        records += got
        runs[name] = facts
    order = {n: i for i, n in enumerate(runs)}
    records.sort(key=lambda r: (order[r["run"]], PARTS.index(r["part"])))
    meta = {**machine(), "runs": runs, "minutes": round((time.monotonic() - t0) / 60, 1), "quick": quick}
    rows = summarize(records, runs)
    meta["summary"] = rows
    write_json(path, meta, records)
    plot(records, runs, out_dir / "scale.png")
    (out_dir / "scale.md").write_text(render(meta, rows))
    log("scale", f"written {path}, scale.md and scale.png")
    return 0 if all("failed" not in r for r in records) else 1


def _same_tables(runs: dict[str, Any]) -> str:
    """Which tables of the cluster run equal local[2]'s at the same size."""
    a, b = runs.get("tenth"), runs.get("tenth-cluster")
    if not a or not b:
        return "The cluster run and its local[2] twin have not both run yet."
    ca, cb = a["checksums"], b["checksums"]
    differ = sorted(t for t in ca.keys() | cb.keys() if ca.get(t) != cb.get(t))
    return f"Table checksums, cluster vs local[2] at a tenth: {len(ca) - len(differ)} of {len(ca)} equal" + (
        f"; differing: {', '.join(f'`{t}`' for t in differ)}." if differ else "."
    )


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """scale.md."""
    table = markdown_table(
        rows,
        [
            ("run", "run", ""),
            ("part", "part", ""),
            ("commit", "commit", ""),
            ("seconds", "seconds", ",.0f"),
            ("tuples_per_s", "tuples/s", ",d"),
            ("x_real_time", "× real time", ".2f"),
            ("x_real_time_stage", "× real time, stage alone", ".2f"),
            ("first_tenth_s", "interval s, first tenth", ".1f"),
            ("last_tenth_s", "last tenth", ".1f"),
            ("last_vs_first", "last / first", ".2f"),
            ("check_share", "share in checks", ".2f"),
            ("peak_pss_driver_mb", "peak PSS Python driver (MB)", ",d"),
            ("peak_pss_jvm_workers_mb", "peak PSS JVM (MB)", ",d"),
            ("executor_tasks", "Spark tasks", ",d"),
            ("executor_task_s", "task time (s)", ",d"),
            ("cores_busy", "task time / wall", ".2f"),
            ("python_driver_cpu_s", "Python driver CPU (s)", ",.0f"),
            ("failed", "failed", ""),
        ],
    )
    runs = "\n".join(
        f"- {r['label']}: {r['tuples']:,} tuples, {r['play_s']:g} s of play, master `{r['master']}`, "
        f"replay generated in {r['generated_s']} s, last invocation at commit {r['commit']}, {r['date']}"
        for r in meta["runs"].values()
    )
    return (
        "# Scale: the whole pipeline over the DEBS 2013 full game's size\n\n"
        f"`bash infra/bench.sh scale{' --quick' if meta['quick'] else ''}` ({meta['minutes']} min for "
        "the runs of its last invocation). The replay is synthetic soccer play at the real sensor "
        f"rates, delayed by the `{PRESET}` preset, in plain CSV parts of {INTERVAL_S:g} s of "
        "arrivals. Each part of the pipeline runs in a process of its own with "
        "`spark.driver.maxResultSize` at "
        f"{MAX_RESULT}: the stream parts over {INTERVAL_S:g} s arrival intervals, each interval followed "
        "by the check of what closed in it (the DAGs' `--since/--until`); the join adapts its retention "
        "every L inside its passes, the aggregates repair by the Γ rule after each interval; the θ "
        f"backfill runs in {INTERVAL_S:g} s event-time slices over the first {THETA_SPAN_S:g} s of play "
        "(`theta`), and over the whole replay in one run (`theta-day`).\n\n"
        f"Runs:\n{runs}\n\n{table}\n\n"
        "× real time: seconds of play processed per second (the θ backfill: of the slices it ran); "
        "stage alone: the same without the checks; `sss-join` and `sss-aggregate`: Spark Structured "
        "Streaming's own operators on the same queries, one part per micro-batch, the throughput "
        "anchor (they drop what is behind their watermark and check nothing); "
        "interval s: mean time of a full interval (stage + check) in the first and the last tenth of "
        "the intervals; Spark tasks and task time: Spark's own executor metrics (REST API), task "
        "time / wall the cores they kept busy on average, beside the Python driver's own CPU time "
        "(the JVM excluded).\n\n"
        f"{_same_tables(meta['runs'])}\n\n![per-interval time and memory](scale.png)\n\n"
        "Per-interval records: `scale.json`.\n"
    )
