"""Growth: a stream stage's thousandth run costs what its tenth does.

A live run is small (a minute of stream), so what decides whether a stage keeps pace is what a
run pays whatever its size, and whether that grows as the job ages: Delta logs, state snapshots,
small files, the tables a check and the report read. For each stream stage, on one warm
in-process Spark session, a synthetic stream of ``PASSES × PER_PASS`` arrivals is loaded into
bronze (with an ingest log covering it, as the file ingest leaves it); the stage then runs
``PASSES`` passes of ``PER_PASS`` arrivals each, as the scheduler's runs a minute apart would,
and every ``CHECK_EVERY`` passes the check of that pass's interval and the run's page of the
report. Half way, the maintenance DAG's work runs once (OPTIMIZE and VACUUM of every table).

Per pass it records the wall time, the Spark jobs (a job group per pass), the CPU seconds of
this process and its children (the Python driver, Spark's JVM, its Python workers), the commit
files in the stage's tables' logs and the live files of its state table; per check and report,
the wall time and Spark jobs. The summary compares the median of passes 6-15 with the median of
the last ten. ``bash infra/bench.sh growth [--quick]`` writes ``docs/benchmarks/growth.json``,
``.md`` and ``.png``; ``OOO_GROWTH_PASSES`` and ``OOO_GROWTH_STAGES`` change the run.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import (
    DEFAULT_OUT,
    _cpu_seconds,
    _descendants,
    log,
    machine,
    markdown_table,
    write_json,
)
from outoforder.config import REPO_ROOT, Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from outoforder.io.tables import Table

PASSES = 1_000
QUICK_PASSES = 60
PER_PASS = 200  # arrivals a pass (1 ms apart: a pass covers 0.2 s of arrival time)
CHECK_EVERY = 50
T0 = 1_700_000_000_000_000
STEP_US = 1_000
EARLY = range(5, 15)  # passes 6-15: after the first ones, which create the tables and warm up
LATE_N = 10


@dataclass(frozen=True)
class Case:
    """A stream stage, its job, and its check."""

    name: str
    stage: Any  # the PassStage class
    job: Any
    check: Any  # (ctx, since_us, until_us) -> suites
    section: str


def _cases() -> list[Case]:
    from outoforder.stages.aggregate.spec import AggJob
    from outoforder.stages.aggregate.stream import AggregateStream
    from outoforder.stages.aggregate.validate import validate_aggregate
    from outoforder.stages.join.spec import JoinJob
    from outoforder.stages.join.stream import JoinStream
    from outoforder.stages.join.validate import validate_join
    from outoforder.stages.topk.spec import TopKJob
    from outoforder.stages.topk.stream import TopKStream
    from outoforder.stages.topk.validate import validate_topk

    join = JoinJob(s_streams=("team_a",), window_us=20_000, theta=3.0, period_us=400_000, interval_us=100_000)
    agg = AggJob(window_us=50_000, slide_us=10_000, coverage_horizon_us=100_000, initial_k_us=20_000)
    topk = TopKJob(
        score="value", k=3, window_us=100_000, slide_us=50_000, initial_cache_us=20_000, n=3, m=3,
        horizon_us=100_000,
    )  # fmt: skip
    return [
        Case(
            "join", JoinStream, join, lambda c, lo, hi: validate_join(c, hi, fail=False, since_us=lo), "join"
        ),
        Case(
            "aggregate",
            AggregateStream,
            agg,
            lambda c, lo, hi: validate_aggregate(c, fail=False, until_us=hi, since_us=lo),
            "aggregate",
        ),
        Case(
            "topk",
            TopKStream,
            topk,
            lambda c, lo, hi: validate_topk(c, fail=False, until_us=hi, since_us=lo),
            "topk",
        ),
    ]


def at(i: int) -> int:
    """Arrival ``i``'s arrival time."""
    return T0 + i * STEP_US


def _load(spark: SparkSession, settings: Settings, source: str, n: int) -> None:
    """``n`` arrivals of two streams with light disorder into bronze, and an ingest log covering them."""
    import numpy as np
    import pandas as pd

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, INGEST_LOG

    rng = np.random.default_rng(11)
    seq = np.arange(n)
    frame = pd.DataFrame({
        "source": source, "stream": np.where(rng.random(n) < 0.6, "team_a", "ball"), "key": "k",
        "event_ts": 10_000_000_000 + seq * STEP_US - rng.integers(0, 30_000, n) * (rng.random(n) < 0.3),
        "arrival_seq": seq, "arrival_ts": T0 + seq * STEP_US, "x": rng.uniform(0, 10, n),
        "y": rng.uniform(0, 10, n), "z": None, "value": rng.gamma(2.0, 3.0, n), "attrs": None,
        "row_hash": seq, "ingest_id": "bench", "source_file": "bench", "line_no": seq + 1,
    })[BRONZE.schema.fieldNames()]  # fmt: skip
    for lo in range(0, n, 200_000):
        part = frame.iloc[lo : lo + 200_000]
        df = spark.createDataFrame([tuple(r) for r in part.itertuples(index=False)], BRONZE.schema)
        delta.append_once(df, BRONZE, settings.lake_root, f"bench-{source}", lo)
    done = [("log", "done", 0, source, "bench", "", 0, "r", 0, 0, 0, 0, 0, 0, None, None, at(n))]
    delta.merge_new(
        spark.createDataFrame(done, INGEST_LOG.schema),
        INGEST_LOG,
        settings.lake_root,
        ("ingest_id", "status"),
    )


def _cpu() -> float:
    """CPU seconds of this process and every process below it (the JVM, Python workers)."""
    me = os.getpid()
    return sum(_cpu_seconds(p) for p in [me, *_descendants(me)])


def _log_files(tables: list[Table], lake: str) -> int:
    n = 0
    for t in tables:
        folder = Path(t.path(lake)) / "_delta_log"
        if folder.is_dir():
            n += sum(1 for f in folder.iterdir() if f.name.endswith(".json") and f.name[:-5].isdigit())
    return n


def _live_files(table: Table, lake: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(table.path(lake)).file_uris())


def run_case(spark: SparkSession, settings: Settings, case: Case, passes: int) -> list[dict[str, Any]]:
    """The stage's passes (and every CHECK_EVERY-th pass's check and report); one record per pass."""
    from outoforder.io import delta
    from outoforder.io.conflicts import retry_on_conflict
    from outoforder.io.tables import ALL_TABLES
    from outoforder.quality.report import build_reports
    from outoforder.stages.context import StageContext

    lake = str(settings.lake_root)
    source = f"bench/growth-{case.name}"
    _load(spark, settings, source, passes * PER_PASS)
    ctx = StageContext.of(spark, settings, source, case.job)
    sc = spark.sparkContext
    tables = [case.stage.state_table, *case.stage.outputs]
    out: list[dict[str, Any]] = []
    for i in range(passes):
        lo, hi = at(i * PER_PASS), at((i + 1) * PER_PASS)
        if i == passes // 2:  # the maintenance DAG's daily work, once
            t0 = time.monotonic()
            for t in ALL_TABLES:
                if delta.exists(spark, t, lake):
                    retry_on_conflict(delta.maintain)(spark, t, lake, True)
            log("growth", f"{case.name}: maintenance after {i} passes, {time.monotonic() - t0:.0f} s")
        group = f"growth-{case.name}-{i}"
        sc.setJobGroup(group, "a pass")
        cpu0, t0 = _cpu(), time.monotonic()
        summary = case.stage(ctx).run(lo, hi)
        wall, cpu = time.monotonic() - t0, _cpu() - cpu0
        sc.setJobGroup("", "")
        rec: dict[str, Any] = {
            "stage": case.name, "pass": i + 1, "arrivals": 0 if summary is None else summary.arrivals,
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "jobs": len(sc.statusTracker().getJobIdsForGroup(group)),
            "log_files": _log_files(tables, lake), "state_files": _live_files(case.stage.state_table, lake),
        }  # fmt: skip
        if (i + 1) % CHECK_EVERY == 0 or i + 1 in (10, passes):
            sc.setJobGroup(group + "-check", "a check")
            t0 = time.monotonic()
            case.check(ctx, lo, hi)
            rec["check_s"] = round(time.monotonic() - t0, 3)
            rec["check_jobs"] = len(sc.statusTracker().getJobIdsForGroup(group + "-check"))
            sc.setJobGroup(group + "-report", "a report")
            t0 = time.monotonic()
            build_reports(spark, settings, f"growth-{i}", lo, hi, sections=[case.section], due=(False, True))
            rec["report_s"] = round(time.monotonic() - t0, 3)
            rec["report_jobs"] = len(sc.statusTracker().getJobIdsForGroup(group + "-report"))
            sc.setJobGroup("", "")
            log(
                "growth",
                f"{case.name}: pass {i + 1}/{passes}: {wall:.2f} s, {rec['jobs']} jobs, check "
                f"{rec['check_s']:.2f} s ({rec['check_jobs']} jobs), {rec['log_files']} log files",
            )
        out.append(rec)
    return out


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else float("nan")


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage: the early passes' medians, the last ten's, their ratios."""
    rows = []
    for name in dict.fromkeys(r["stage"] for r in records):
        rs = [r for r in records if r["stage"] == name]
        early = [rs[i] for i in EARLY if i < len(rs)]
        late = rs[-LATE_N:]
        checks = [r for r in rs if "check_s" in r]
        row: dict[str, Any] = {"stage": name, "passes": len(rs)}
        for key in ("wall_s", "cpu_s", "jobs"):
            a, b = _median([r[key] for r in early]), _median([r[key] for r in late])
            row[f"{key}_early"], row[f"{key}_late"] = a, b
            row[f"{key}_ratio"] = round(b / a, 2) if a else None
        row["log_files_late"] = late[-1]["log_files"]
        row["state_files_late"] = late[-1]["state_files"]
        if len(checks) >= 2:
            row["check_s_first"], row["check_s_last"] = checks[0]["check_s"], checks[-1]["check_s"]
            row["check_jobs_last"], row["report_s_last"] = checks[-1]["check_jobs"], checks[-1]["report_s"]
        rows.append(row)
    return rows


def _plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for name in dict.fromkeys(r["stage"] for r in records):
        rs = [r for r in records if r["stage"] == name]
        ax.plot([r["pass"] for r in rs], [r["wall_s"] for r in rs], lw=0.8, label=name)
    ax.set_xlabel("pass (a scheduled run's)")
    ax.set_ylabel("seconds")
    ax.set_title("A pass's wall time as the job ages")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _earlier(path: Path, names: list[str], passes: int) -> list[dict[str, Any]]:
    """The records of stages this run does not measure, from an earlier run of as many passes."""
    import json

    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    if doc.get("meta", {}).get("passes") != passes:
        return []
    return [r for r in doc["records"] if r["stage"] not in names and "commit" in r]


def _write(out_dir: Path, passes: int, records: list[dict[str, Any]]) -> None:
    rows = summarize(records)
    firsts = [r for r in records if r["pass"] == 1]
    commits = ", ".join(f"{r['stage']} {r['commit']} ({r['date']}, {r['minutes']} min)" for r in firsts)
    meta = {**machine(), "passes": passes, "per_pass": PER_PASS}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "growth.json", meta, records)
    _plot(records, out_dir / "growth.png")
    table = markdown_table(
        rows,
        [("stage", "stage", ""), ("passes", "passes", ""), ("wall_s_early", "pass s (6-15)", ".2f"),
         ("wall_s_late", "pass s (last 10)", ".2f"), ("wall_s_ratio", "ratio", ".2f"),
         ("cpu_s_early", "CPU-s (6-15)", ".2f"), ("cpu_s_late", "CPU-s (last 10)", ".2f"),
         ("cpu_s_ratio", "ratio", ".2f"),
         ("jobs_early", "jobs (6-15)", ""), ("jobs_late", "jobs (last 10)", ""),
         ("log_files_late", "log files at the end", ""), ("state_files_late", "state files at the end", ""),
         ("check_s_first", "check s (first)", ".2f"), ("check_s_last", "check s (last)", ".2f"),
         ("check_jobs_last", "check jobs (last)", ""), ("report_s_last", "report s (last)", ".2f")],
    )  # fmt: skip
    (out_dir / "growth.md").write_text(
        "# Growth: a run's cost as the job ages\n\n"
        f"{passes} passes of {PER_PASS} arrivals per stream stage on one warm Spark session "
        f"(maintenance once, half way); `bash infra/bench.sh growth`. Each stage's run: {commits}.\n\n"
        + table
        + "\n\n![pass wall time](growth.png)\n"
    )
    log("growth", f"written {out_dir / 'growth.json'}, .md and .png")


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Every stage's passes; writes docs/benchmarks/growth.json, .md and .png after each stage."""
    del data_dir, spark_on
    from outoforder.spark.session import get_spark

    passes = int(os.environ.get("OOO_GROWTH_PASSES", QUICK_PASSES if quick else PASSES))
    names = [n for n in os.environ.get("OOO_GROWTH_STAGES", "join,aggregate,topk").split(",") if n]
    base = load_settings()
    work = REPO_ROOT / ".local" / "bench" / "growth"
    spark = get_spark(base, app_name="outoforder-growth")
    # A run of some stages keeps the other stages' records (one stage is half an hour at 1,000 passes),
    # and each stage is written as it ends, so an interrupted run loses one stage at most.
    records = _earlier(out_dir / "growth.json", names, passes)
    for case in _cases():
        if case.name not in names:
            continue
        t0 = time.monotonic()
        shutil.rmtree(work / case.name, ignore_errors=True)
        quality = replace(base.quality, reports_dir=work / case.name / "reports")
        settings = replace(base, lake_root=str(work / case.name / "lake"), quality=quality)
        stage_records = run_case(spark, settings, case, passes)
        facts = {"commit": machine()["commit"], "date": time.strftime("%Y-%m-%d"),
                 "minutes": round((time.monotonic() - t0) / 60, 1)}  # fmt: skip
        records = [r for r in records if r["stage"] != case.name] + [{**r, **facts} for r in stage_records]
        _write(out_dir, passes, records)
    return 0
