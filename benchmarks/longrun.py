"""Long run: ten million synthetic tuples through the stream stages, with state held to a budget.

1. A synthetic soccer replay of at least ``TUPLES`` tuples (light disorder) is generated and
   ingested into bronze by the ingest stage, as a process, as Airflow runs it (a lake that already
   holds the replay is reused).
2. Each stream stage (``aggregate-stream``, ``topk-stream``, ``join-stream``) then runs over the
   whole replay, one arrival-time interval after the other, in a process of its own, with
   ``stream.state_budget_rows`` set to ``BUDGET_ROWS``: a stage whose state would pass it fails.
3. A sampler thread reads the memory (PSS) of the stage's process (the Python driver) and of its
   descendants (Spark's JVM, the Python workers) from ``/proc`` every 0.2 s.

Per interval it records the arrivals, the wall time, the throughput, the state carried to the next
interval (rows) and the peak memory while the interval ran; after it, the JVM's heap in use.
``bash infra/bench.sh longrun [--quick]`` writes ``docs/benchmarks/longrun.json``, ``.md`` and
``.png``. ``OOO_LONGRUN_STAGES`` runs some of the stages and keeps the others' earlier figures;
``OOO_LONGRUN_TUPLES`` and ``OOO_LONGRUN_INTERVAL_S`` change the size and the interval.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import (
    DEFAULT_OUT,
    SAMPLE_S,
    MemorySampler,
    earlier_results,
    log,
    machine,
    markdown_table,
    run_command,
    stage_command,
    write_json,
)
from outoforder.config import REPO_ROOT, Settings, StreamSettings, load_settings
from outoforder.errors import StateError
from outoforder.stages.context import StageContext

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from outoforder.stages.join.spec import JoinJob

PRESET = "exponential:mean=0.05,late_prob=0.3"
TUPLES = 10_000_000
TUPLES_PER_PLAY_S = 10_800  # the synthetic game's rate (all sensors), measured on its generator
INTERVAL_S = 60.0
BUDGET_ROWS = 1_000_000


@dataclass(frozen=True)
class StreamStage:
    """A stream stage as the long run drives it: one call per interval (its summary has ``state_rows``)."""

    name: str
    run: Callable[[SparkSession, Settings, str, int, int], Any]


def narrow_join() -> JoinJob:
    """The join of the long runs: 0.1 s and 0.5 m, about one result pair per tuple.

    The default join (0.5 s, 2 m) makes about ten pairs per tuple: 100 million result rows over
    ten million tuples, and the figures would measure the writing of result rows.
    """
    from outoforder.stages.join.spec import JoinJob

    return JoinJob(window_us=100_000, theta=0.5)


def stream_stages() -> list[StreamStage]:
    """The three stream stages with the jobs the long run gives them (the CLI's defaults, a narrower join)."""
    from outoforder.stages.aggregate.spec import AggJob
    from outoforder.stages.aggregate.stream import AggregateStream
    from outoforder.stages.join.stream import JoinStream
    from outoforder.stages.topk.spec import TopKJob
    from outoforder.stages.topk.stream import TopKStream

    agg, topk, join = AggJob(), TopKJob(), narrow_join()
    return [
        StreamStage(
            "aggregate-stream",
            lambda sp, st, src, lo, hi: AggregateStream(StageContext.of(sp, st, src, agg)).run(
                lo, hi, catch_up=True
            ),
        ),
        StreamStage(
            "topk-stream",
            lambda sp, st, src, lo, hi: TopKStream(StageContext.of(sp, st, src, topk)).run(
                lo, hi, catch_up=True
            ),
        ),
        StreamStage(
            "join-stream",
            lambda sp, st, src, lo, hi: JoinStream(StageContext.of(sp, st, src, join)).run(
                lo, hi, catch_up=True
            ),
        ),
    ]


def prepare(
    spark: SparkSession, work: Path, tuples: int, env: dict[str, str], config: Path
) -> tuple[str, int]:
    """The replay's source id and row count in the long run's lake (generated and ingested if absent)."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE
    from outoforder.stages.ingest.replay import make_replay, replay_source

    seconds = float(-(-tuples // TUPLES_PER_PLAY_S))
    source = replay_source(PRESET, seconds, 7)
    lake = work / "lake"
    if delta.exists(spark, BRONZE, str(lake)):
        n = delta.read(spark, BRONZE, str(lake)).where(F.col("source") == source).count()
        if n >= tuples:
            log("longrun", f"reusing {n:,} tuples of {source} in {lake}")
            return source, n
    log("longrun", f"generating {seconds:g} s of play ({PRESET})")
    replay = make_replay(work / "landing", PRESET, seconds, 7)
    log("longrun", f"ingesting {replay.report['tuples']:,} tuples from {replay.path.name} (a few minutes)")
    t0 = time.monotonic()
    out = run_command(
        stage_command(config, "ingest", "--file", str(replay.path), "--reader", "soccer_synthetic",
                      "--source", source),
        {**env, "OOO_LAKE_ROOT": str(lake)},
        "ingest",
    )  # fmt: skip
    log("longrun", f"ingested in {time.monotonic() - t0:.0f} s: {out.strip().splitlines()[-1]}")
    replay.path.unlink()  # 200 MB; bronze holds it now
    n = delta.read(spark, BRONZE, str(lake)).where(F.col("source") == source).count()
    return source, n


def run_stage(
    spark: SparkSession,
    settings: Settings,
    stage: StreamStage,
    source: str,
    span: tuple[int, int],
    step_us: int,
    sampler: MemorySampler,
) -> list[dict[str, Any]]:
    """Every interval of ``span`` through ``stage``; one record per interval (or one for the failure)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        msg = "the Spark session has no JVM gateway (Spark Connect?): the long run needs a classic session"
        raise StateError(msg)
    runtime = jvm.java.lang.Runtime.getRuntime()
    records: list[dict[str, Any]] = []
    done = 0
    t_stage = time.monotonic()
    for i, lo in enumerate(range(span[0], span[1], step_us)):
        hi = min(lo + step_us, span[1])
        sampler.reset()
        t0 = time.monotonic()
        try:
            summary = stage.run(spark, settings, source, lo, hi)
        except Exception as e:  # recorded as the stage's outcome, with the interval that failed
            records.append(
                {"stage": stage.name, "interval": i, "failed": f"{type(e).__name__}: {str(e)[:500]}"}
            )
            log("longrun", f"{stage.name} interval {i}: {e}")
            break
        seconds = time.monotonic() - t0
        driver, others, both = sampler.peak()
        done += summary.arrivals
        rec = {
            "stage": stage.name,
            "interval": i,
            "arrivals": summary.arrivals,
            "tuples_so_far": done,
            "seconds": round(seconds, 2),
            "tuples_per_s": round(summary.arrivals / seconds) if seconds else None,
            "interval_s": step_us / 1e6,
            "full_interval": hi - lo == step_us,  # the last one holds only the replay's tail
            "stage_elapsed_s": round(time.monotonic() - t_stage, 1),
            "state_rows": int(summary.state_rows),
            "peak_pss_driver_mb": round(driver / 2**20),
            "peak_pss_jvm_workers_mb": round(others / 2**20),
            "peak_pss_total_mb": round(both / 2**20),
            "jvm_heap_used_mb": round((runtime.totalMemory() - runtime.freeMemory()) / 2**20),
            "jvm_heap_max_mb": round(runtime.maxMemory() / 2**20),
        }
        records.append(rec)
        log(
            "longrun",
            f"{stage.name} interval {i}: {summary.arrivals:,} tuples in {seconds:.1f} s "
            f"({rec['tuples_per_s']:,}/s), state {rec['state_rows']:,} rows, "
            f"peak PSS {rec['peak_pss_total_mb']:,} MB, heap {rec['jvm_heap_used_mb']:,} MB; {done:,} so far",
        )
    return records


def summarize(records: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """One row per stage: tuples, time, throughput, state against the budget, peak memory."""
    rows = []
    for name in dict.fromkeys(r["stage"] for r in records):
        rs = [r for r in records if r["stage"] == name and "failed" not in r]
        failed = [r["failed"] for r in records if r["stage"] == name and "failed" in r]
        seconds = sum(r["seconds"] for r in rs)
        tuples = sum(r["arrivals"] for r in rs)
        rates = sorted(r["tuples_per_s"] for r in rs if r["full_interval"] and r["tuples_per_s"])
        state = max((r["state_rows"] for r in rs), default=0)
        rows.append(
            {
                "stage": name,
                "intervals": len(rs),
                "tuples": tuples,
                "minutes": round(seconds / 60, 1),
                "tuples_per_s": round(tuples / seconds) if seconds else None,
                "slowest_interval_tuples_per_s": rates[0] if rates else None,
                "fastest_interval_tuples_per_s": rates[-1] if rates else None,
                "max_state_rows": state,
                "state_share_of_budget": round(state / budget, 4),
                "peak_pss_total_mb": max((r["peak_pss_total_mb"] for r in rs), default=0),
                "peak_pss_driver_mb": max((r["peak_pss_driver_mb"] for r in rs), default=0),
                "peak_jvm_heap_used_mb": max((r["jvm_heap_used_mb"] for r in rs), default=0),
                "failed": " ".join(failed[0].split())[:300] if failed else "",  # one line: a table cell
            }
        )
    return rows


def plot(records: list[dict[str, Any]], traces: dict[str, list[Any]], budget: int, out: Path) -> None:
    """Throughput and state per interval; memory over time (``traces``: per stage, (s, driver, others MB))."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 9))
    ok = [r for r in records if "failed" not in r]
    for name in dict.fromkeys(r["stage"] for r in ok):
        rs = [r for r in ok if r["stage"] == name]
        full = [r for r in rs if r["full_interval"]]  # the tail interval's rate says nothing
        axes[0].plot(
            [r["tuples_so_far"] / 1e6 for r in full],
            [r["tuples_per_s"] for r in full],
            marker="o",
            label=name,
        )
        axes[1].plot(
            [r["tuples_so_far"] / 1e6 for r in rs], [r["state_rows"] for r in rs], marker="o", label=name
        )
    axes[0].set(xlabel="tuples processed (millions)", ylabel="tuples / s per interval", title="Throughput")
    axes[1].axhline(budget, color="red", linestyle="--", label="budget")
    axes[1].set(
        xlabel="tuples processed (millions)", ylabel="state rows", yscale="log", title="State carried"
    )
    offset = 0.0
    for name, trace in traces.items():
        t = [offset + s / 60 for s, _, _ in trace]
        axes[2].plot(
            t, [d for _, d, _ in trace], color="tab:blue", label="Python driver" if not offset else None
        )
        axes[2].plot(
            t,
            [o for _, _, o in trace],
            color="tab:orange",
            label="JVM + Python workers" if not offset else None,
        )
        axes[2].axvline(offset, color="grey", linewidth=0.5)
        axes[2].text(offset, 0, f" {name}", fontsize=7, rotation=90, va="bottom")
        offset = t[-1] if t else offset
    axes[2].set(xlabel="minutes", ylabel="MB (PSS)", title="Memory")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _run_one(stage_name: str, work: Path, interval_s: float) -> int:
    """Child process: one stage over the whole replay; its records and memory trace to a JSON file."""
    import json

    from outoforder.spark.session import get_spark
    from outoforder.stages.state import pending_span

    settings = _settings(work)
    source = os.environ["OOO_LONGRUN_SOURCE"]
    spark = get_spark(settings, app_name=f"outoforder-longrun-{stage_name}")
    span = pending_span(spark, settings, source, None)  # [first arrival, last + 1)
    if span is None:
        msg = f"no arrivals of {source} in {settings.lake_root}"
        raise StateError(msg)
    (stage,) = [s for s in stream_stages() if s.name == stage_name]
    for t in stage_tables(stage.name):  # a fresh run of the stage on the reused bronze
        shutil.rmtree(t.path(settings.lake_root), ignore_errors=True)
    sampler = MemorySampler().start()
    try:
        records = run_stage(spark, settings, stage, source, span, round(interval_s * 1e6), sampler)
    finally:
        sampler.stop()
    trace = [(round(t, 1), d >> 20, o >> 20) for t, d, o in sampler.trace[:: max(1, round(1 / SAMPLE_S))]]
    (work / f"{stage.name}.json").write_text(json.dumps({"records": records, "trace": trace}))
    return 0


def _intervals(by_stage: dict[str, float]) -> str:
    """'60 s' when all stages used one length, else 'aggregate-stream 60 s, join-stream 20 s'."""
    if len(set(by_stage.values())) <= 1:
        return f"intervals of {next(iter(by_stage.values()), 0):g} s"
    return ", ".join(f"{k} {v:g} s" for k, v in by_stage.items())


def _settings(work: Path) -> Settings:
    """The long run's settings: its config file (written by :func:`main`), its lake, the budget."""
    env = {**os.environ, "OOO_LAKE_ROOT": str(work / "lake")}
    settings = load_settings(work / "longrun.toml", env=env)
    return replace(settings, stream=StreamSettings(state_budget_rows=BUDGET_ROWS))


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Ingest the replay, run each stream stage over it in a process of its own; write the results."""
    del data_dir, spark_on
    import json
    import subprocess
    import sys

    from outoforder.spark.session import get_spark

    interval_s = float(os.environ.get("OOO_LONGRUN_INTERVAL_S", 10.0 if quick else INTERVAL_S))
    work = REPO_ROOT / ".local" / "bench" / "longrun"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OOO_WORK_DIR": str(work), "OOO_REPORTS_DIR": str(work / "reports")}
    (work / "longrun.toml").write_text('[quality]\non_violation = "warn"\n[spark]\nshuffle_partitions = 2\n')
    child = os.environ.get("OOO_LONGRUN_CHILD")
    if child:
        return _run_one(child, work, interval_s)
    tuples = int(os.environ.get("OOO_LONGRUN_TUPLES", 500_000 if quick else TUPLES))
    names = tuple(n for n in os.environ.get("OOO_LONGRUN_STAGES", "").split(",") if n)
    settings = _settings(work)
    spark = get_spark(settings, app_name="outoforder-longrun")
    source, n = prepare(spark, work, tuples, env, work / "longrun.toml")
    spark.stop()  # the stages run in processes of their own: no idle JVM beside them
    chosen = [s for s in stream_stages() if not names or s.name in names]
    rerun = {s.name for s in chosen}
    records, earlier, _ = earlier_results(out_dir / "longrun.json", rerun, "longrun")
    traces = {
        k: v for k, v in earlier.get("memory_trace_s_driver_mb_others_mb", {}).items() if k not in rerun
    }
    t0 = time.monotonic()
    for stage in chosen:
        log(
            "longrun", f"{stage.name}: {n:,} tuples in intervals of {interval_s:g} s, in a process of its own"
        )
        part = work / f"{stage.name}.json"
        part.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "benchmarks", "longrun"] + (["--quick"] if quick else [])
        done = subprocess.run(
            cmd, env={**env, "OOO_LONGRUN_CHILD": stage.name, "OOO_LONGRUN_SOURCE": source,
                      "OOO_LONGRUN_INTERVAL_S": str(interval_s)},
            stdout=None, stderr=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        if part.exists():
            got = json.loads(part.read_text())
            records += got["records"]
            traces[stage.name] = got["trace"]
        if done.returncode != 0:
            tail = [ln for ln in done.stderr.splitlines() if ln.strip() and "WARN" not in ln][-3:]
            records.append(
                {"stage": stage.name, "failed": f"process exit {done.returncode}: {' | '.join(tail)}"}
            )
            log("longrun", f"{stage.name} failed: {records[-1]['failed'][:600]}")
    meta = {
        **machine(),
        "replay": f"{PRESET}, {n:,} tuples ({source})",
        "tuples": n,
        "interval_s": {r["stage"]: r["interval_s"] for r in records if "interval_s" in r},
        "state_budget_rows": BUDGET_ROWS,
        "driver_memory": settings.spark.driver_memory,
        "master": settings.spark.master,
        "minutes": round((time.monotonic() - t0) / 60, 1),
    }
    meta["stages_of_this_run"] = [s.name for s in chosen]
    write_results(out_dir, meta, records, traces, quick)
    log("longrun", f"written {out_dir / 'longrun.json'}, .md and .png")
    return 0 if all("failed" not in r for r in records) else 1


def write_results(
    out_dir: Path,
    meta: dict[str, Any],
    records: list[dict[str, Any]],
    traces: dict[str, list[Any]],
    quick: bool,
) -> None:
    """longrun.json, .md and .png from the records (stages this run did not repeat keep earlier figures)."""
    kept = [n for n in dict.fromkeys(r["stage"] for r in records) if n not in meta["stages_of_this_run"]]
    rows = summarize(records, BUDGET_ROWS)
    meta |= {"summary": rows, "memory_trace_s_driver_mb_others_mb": traces}
    write_json(out_dir / "longrun.json", meta, records)
    plot(records, traces, BUDGET_ROWS, out_dir / "longrun.png")
    table = markdown_table(
        rows,
        [
            ("stage", "stage", ""),
            ("intervals", "intervals", "d"),
            ("tuples", "tuples", ",d"),
            ("minutes", "minutes", ".1f"),
            ("tuples_per_s", "tuples/s", ",d"),
            ("slowest_interval_tuples_per_s", "slowest full interval (tuples/s)", ",d"),
            ("max_state_rows", "max state (rows)", ",d"),
            ("state_share_of_budget", "share of budget", ".3f"),
            ("peak_pss_total_mb", "peak PSS, all (MB)", ",d"),
            ("peak_pss_driver_mb", "peak PSS, Python driver (MB)", ",d"),
            ("peak_jvm_heap_used_mb", "JVM heap in use, max (MB)", ",d"),
            ("failed", "failed", ""),
        ],
    )
    (out_dir / "longrun.md").write_text(
        f"# Long run: stream stages over {meta['tuples']:,} tuples\n\n"
        f"`bash infra/bench.sh longrun{' --quick' if quick else ''}` on {meta['date']} "
        f"({meta['minutes']} min for {', '.join(meta['stages_of_this_run'])}; {meta['master']}, driver "
        f"memory {meta['driver_memory']}). "
        + (f"The figures of {', '.join(kept)} come from an earlier run of the same command. " if kept else "")
        + f"Replay: {meta['replay']}, ingested by the ingest stage. Each stream stage runs over every "
        f"arrival interval ({_intervals(meta['interval_s'])}) in a process of its own (as `--every-s` "
        "does) with "
        f"`stream.state_budget_rows = {BUDGET_ROWS:,}`; that process tree's memory (PSS, so shared "
        f"pages count once: Python driver; JVM and Python workers) is sampled every {SAMPLE_S} s.\n\n"
        f"{table}\n\n![throughput, state and memory](longrun.png)\n\nPer-interval records: `longrun.json`.\n"
    )


def stage_tables(name: str) -> tuple[Any, ...]:
    """The tables a stream stage writes (a fresh run of the stage on a reused lake removes them)."""
    from outoforder.io import tables as T

    return {
        "aggregate-stream": (
            T.AGG_STATE,
            T.AGG_RESULTS,
            T.AGG_LEDGER,
        ),
        "topk-stream": (
            T.TOPK_STATE,
            T.TOPK_RESULTS,
            T.TOPK_LEDGER,
        ),
        "join-stream": (T.JOIN_STATE, T.JOIN_PARAMS, T.JOIN_RESULTS),
    }[name]
