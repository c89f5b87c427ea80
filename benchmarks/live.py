"""Live soak: the pipeline as a user runs it, through Airflow's own scheduler on a live stream.

Each case starts live mode (``infra/live.sh start``: the broker, the shared Spark Connect server,
Airflow standalone, and the synthetic game replayed into a topic at its own pace, with the
``hpm_game1`` disorder), lets the scheduler run the DAGs every minute for ``MINUTES`` minutes of
real time, stops the replay, waits for the last runs, and measures:

- **lag** per DAG and run: when the run's stage task committed its results (the task's end) minus
  the end of the arrival interval it covers (its logical date); its trend (the mean of the last
  tenth of the runs against the first tenth's) and every run's state;
- **freshness**: for every result row the stream stages wrote (join pairs, aggregate windows,
  top-k windows), when its pass wrote it (``written_at_us``: the pass's start, its commit within
  the pass) minus the arrival time of the tuple that produced it, p50 and p95;
- the machine's **CPU** share (busy time from ``/proc/stat``), and the **memory** (PSS) of the
  Spark Connect server (its JVM and Python workers) and of Airflow (every process of standalone);
- at the end, **accounting**: records sent = bronze accepted + quarantined, and the checks'
  verdicts (every validation run of the session, from ``gold/quality_runs``).

Cases: ``tenth`` (the sensors at a tenth of the papers' rates, ~1,100 tuples/s) and ``full``
(~10,800 tuples/s). ``bash infra/bench.sh live [--quick]`` writes ``docs/benchmarks/live.json``,
``.md`` and ``.png``; ``--quick`` runs 6 minutes of each (a smoke run, not the figures).
``OOO_LIVE_CASES=tenth`` runs one case and keeps the other's earlier figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    CLOCK_TICKS,
    DEFAULT_OUT,
    _cpu_seconds,
    _descendants,
    _memory_bytes,
    earlier_results,
    log,
    machine,
    markdown_table,
    run_command,
    source_commit,
    write_json,
)
from outoforder.config import REPO_ROOT
from outoforder.errors import StateError
from outoforder.sources.disorder import GAME_RATE_PER_S

CASES = {"tenth": 0.1, "full": 1.0}
MINUTES = 32
QUICK_MINUTES = 6
DRAIN_S = 240  # after the replay stops: how long the last runs may take to finish
FLUSH_S = 5  # a stopped replay delivers what it handed over within this (librdkafka's flush)
RECENT_S = 180  # while it runs, the soak looks at the runs of the last few minutes only
SAMPLES = "samples.jsonl"  # the sampler's file in the session's folder
SAMPLE_EVERY_S = 5.0
# the stream DAGs and their stage task (whose end is when the run's results are committed)
STAGE_TASKS = {
    "ingest_kafka": "ingest",
    "join_stream": "join_interval",
    "aggregate_stream": "aggregate_interval",
    "topk_stream": "topk_interval",
}
TARGET_LAG_S = 60.0  # a tenth of the full rate: every DAG's mean lag at most this
TARGET_TREND = 1.2  # and the last tenth of the runs' mean lag at most this times the first tenth's
TARGET_FRESH_P95_S = 120.0
TARGET_JUDGED_MET = 0.95  # the share of periods (join) and windows (aggregates, top-k) meeting their target
TARGET_SERVER_MB = 4096  # the Spark Connect server's PSS (its JVM and Python workers)
TARGET_RATE_SHARE = 0.95  # the replay's pace against the rate asked for (the pipeline keeps it fed)


PARTS = ("jvm", "workers", "stages")  # the server tree's parts (:func:`part`)


def part(pid: int) -> str:
    """Which part of the Spark Connect server's tree a process is (the rest, e.g. Airflow's: ``stages``).

    ``jvm``: the server's JVM; ``workers``: Spark's Python workers (its daemon and their forks, which
    run the operators' vectorised code); ``stages``: the stage runner, the stages it forks, shells.
    """
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "stages"
    if cmd and cmd[0].endswith(b"java"):
        return "jvm"
    if any(c in (b"pyspark.daemon", b"pyspark.worker") for c in cmd):
        return "workers"
    return "stages"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def case_env(work: Path) -> dict[str, str]:
    """Live mode's settings for a case of its own: its folders, and free loopback ports."""
    return {
        **os.environ,
        "OOO_LIVE_DIR": str(work / "live"),
        "OOO_KAFKA_DATA": str(work / "kafka"),
        "OOO_KAFKA_PORT": str(_free_port()),
        "OOO_KAFKA_CONTROLLER_PORT": str(_free_port()),
        "OOO_SPARK_CONNECT_DIR": str(work / "spark-connect"),
        "OOO_SPARK_CONNECT_PORT": str(_free_port()),
        "OOO_SPARK_CONNECT_UI_PORT": str(_free_port()),
        "OOO_AIRFLOW_PORT": str(_free_port()),
        "OOO_AIRFLOW_LOG_PORT": str(_free_port()),
        "OOO_AIRFLOW_TRIGGER_LOG_PORT": str(_free_port()),
    }


def _live(env: dict[str, str], *args: str) -> str:
    return run_command(["bash", str(REPO_ROOT / "infra" / "live.sh"), *args], env, f"infra/live.sh {args[0]}")


@dataclass
class Sampler:
    """Every few seconds: the machine's busy share, and the PSS of the server's and Airflow's trees."""

    server_pid: Path
    airflow_pid: Path
    out: Path | None = None  # each sample also appended here, as a JSON line (kept if the benchmark dies)
    samples: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    @staticmethod
    def _cpu() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    @staticmethod
    def _tree(pidfile: Path) -> tuple[dict[str, int], float]:
        """PSS bytes per :func:`part`, CPU seconds (own and reaped children's) of the tree under the pid."""
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return {}, 0.0
        tree = [pid, *_descendants(pid)]
        parts: dict[str, int] = {}
        for p in tree:
            kind = part(p)
            parts[kind] = parts.get(kind, 0) + _memory_bytes(p)
        return parts, sum(_cpu_seconds(p) for p in tree)

    def _run(self) -> None:
        busy0, total0 = self._cpu()
        busy_s = 0.0
        t0 = time.monotonic()
        while not self._stop.wait(SAMPLE_EVERY_S):
            busy, total = self._cpu()
            share = (busy - busy0) / max(total - total0, 1)
            busy_s += (busy - busy0) / CLOCK_TICKS
            busy0, total0 = busy, total
            server_b, server_s = self._tree(self.server_pid)
            airflow_b, airflow_s = self._tree(self.airflow_pid)
            sample = {
                    "t_s": round(time.monotonic() - t0, 1),
                    "cpu_share": round(share, 4),
                    "server_mb": sum(server_b.values()) >> 20,
                    # where the server's memory is: its JVM, Spark's Python workers, the stages
                    **{f"server_{k}_mb": server_b.get(k, 0) >> 20 for k in PARTS},
                    "airflow_mb": sum(airflow_b.values()) >> 20,
                    # cumulative CPU seconds: the machine's busy time, and each tree's
                    "busy_cpu_s": round(busy_s, 1),
                    "server_cpu_s": round(server_s, 1),
                    "airflow_cpu_s": round(airflow_s, 1),
                }  # fmt: skip
            self.samples.append(sample)
            if self.out is not None:
                with self.out.open("a") as f:
                    f.write(json.dumps(sample) + "\n")

    def start(self) -> Sampler:
        """Sample in a thread of its own until :meth:`stop`."""
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def stop(self) -> None:
        """End the sampling."""
        self._stop.set()


class Api:
    """Airflow's REST API as the admin user of standalone (what the UI reads)."""

    def __init__(self, url: str, home: Path) -> None:
        self.url = url
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        body = json.dumps({"username": "admin", "password": passwords["admin"]}).encode()
        req = urllib.request.Request(
            f"{url}/auth/token", body, {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            self.token = str(json.load(resp)["access_token"])

    def get(self, path: str) -> Any:
        """The JSON at ``path``."""
        req = urllib.request.Request(f"{self.url}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, oldest first."""
        return list(self.get(f"/api/v2/dags/{dag_id}/dagRuns?limit=1000&order_by=logical_date")["dag_runs"])

    def tasks(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """A run's task instances by task id."""
        got = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances")
        return {t["task_id"]: t for t in got["task_instances"]}


def _instant(text: str | None) -> float | None:
    return None if not text else datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _since(text: str | None, end: float) -> float | None:
    at = _instant(text)
    return None if at is None else round(at - end, 1)


def run_lags(api: Api, since_s: float) -> dict[str, list[dict[str, Any]]]:
    """Per DAG, its scheduled runs with an interval after ``since_s``: state, interval end, commit, lag.

    A request per run: while the session runs, look at the newest runs only (``since_s`` a few
    minutes back), or the soak's own polling competes with the runs it measures.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for dag_id, stage_task in STAGE_TASKS.items():
        rows = []
        for r in api.runs(dag_id):
            end = _instant(r.get("logical_date"))
            if end is None or end <= since_s or r.get("run_type") != "scheduled":
                continue
            tasks = api.tasks(dag_id, r["dag_run_id"])
            stage = tasks.get(stage_task, {})
            committed = _instant(stage.get("end_date")) if stage.get("state") == "success" else None
            started = _instant(stage.get("start_date"))
            rows.append(
                {
                    "dag": dag_id,
                    "interval_end_s": end,
                    "state": r["state"],
                    "stage_tries": stage.get("try_number"),
                    "committed_s": committed,
                    "lag_s": None if committed is None else round(committed - end, 1),
                    "start_delay_s": None if started is None else round(started - end, 1),
                    "run_end_lag_s": None
                    if not r.get("end_date")
                    else round(_instant(r["end_date"]) - end, 1),  # type: ignore[operator]
                }
            )
        out[dag_id] = sorted(rows, key=lambda x: x["interval_end_s"])
    return out


def run_lags_db(db: Path, since_s: float) -> dict[str, list[dict[str, Any]]]:
    """:func:`run_lags` read from a stopped session's metadata database (SQLite) instead of the API."""
    import sqlite3

    def at(text: str | None) -> float | None:  # the database's UTC times, without a zone
        return None if not text else _instant(text.replace(" ", "T") + "+00:00")

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for dag_id, stage_task in STAGE_TASKS.items():
            rows = []
            runs = con.execute(
                "SELECT run_id, state, logical_date, end_date FROM dag_run "
                "WHERE dag_id = ? AND run_type = 'scheduled' ORDER BY logical_date",
                (dag_id,),
            ).fetchall()
            for run_id, state, logical, ended in runs:
                end = at(logical)
                if end is None or end <= since_s:
                    continue
                stage = con.execute(
                    "SELECT state, start_date, end_date, try_number FROM task_instance "
                    "WHERE dag_id = ? AND run_id = ? AND task_id = ?",
                    (dag_id, run_id, stage_task),
                ).fetchone() or (None, None, None, None)
                committed = at(stage[2]) if stage[0] == "success" else None
                started, finished = at(stage[1]), at(ended)
                rows.append(
                    {
                        "dag": dag_id, "interval_end_s": end, "state": state, "stage_tries": stage[3],
                        "committed_s": committed,
                        "lag_s": None if committed is None else round(committed - end, 1),
                        "start_delay_s": None if started is None else round(started - end, 1),
                        "run_end_lag_s": None if finished is None else round(finished - end, 1),
                    }
                )  # fmt: skip
            out[dag_id] = rows
    finally:
        con.close()
    return out


def recover(session: Path, name: str, rate: float) -> dict[str, Any]:
    """A case's record rebuilt from its session's folder, when the benchmark died before writing it.

    Everything but the Spark REST figures comes from what the session keeps: the lags from
    Airflow's database, freshness and accounting from the lake, the replay's count and pace from its
    log, the machine's samples from the sampler's file (none for sessions older than that file).
    The measured minutes start when the replay did: its log's last write less its duration.
    """
    replay = sent(session / "producer.log")
    if replay is None:
        msg = f"{session}: the replay's log has no summary line: nothing to recover"
        raise StateError(msg)
    replay_started = (session / "producer.log").stat().st_mtime - replay[1]
    lags = run_lags_db(session / "airflow" / "airflow.db", replay_started)
    env = case_env(session.parent.parent)
    samples_file = session / SAMPLES
    samples = (
        [json.loads(line) for line in samples_file.read_text().splitlines() if line.strip()]
        if samples_file.is_file()
        else []
    )
    minutes = round(replay[1] / 60)
    rec = summarize(name, rate, minutes, lags, freshness(env, session / "lake"),
                    accounting(env, session / "lake"), samples, replay, 0.0)  # fmt: skip
    rec["spark_work"] = None
    rec["recovered_from"] = str(session.relative_to(REPO_ROOT))
    return rec


def trend(lags: list[float]) -> float | None:
    """The mean of the last tenth of ``lags`` over the mean of the first tenth (None: too few).

    >>> trend([10, 10, 12, 11, 13, 9, 10, 12, 11, 20])
    2.0
    """
    k = max(1, len(lags) // 10)
    if len(lags) < 2 * k or not sum(lags[:k]):
        return None
    return round((sum(lags[-k:]) / k) / (sum(lags[:k]) / k), 3)


FRESHNESS = {
    # table, the column of the emitting arrival
    "join_stream": ("gold/join_results", "emitted_at_seq"),
    "aggregate_stream": ("gold/agg_results", "emitted_at_seq"),
    "topk_stream": ("gold/topk_results", "emitted_at_seq"),
}


def freshness(env: dict[str, str], lake: Path) -> dict[str, Any]:
    """p50/p95 of a result's write minus its emitting tuple's arrival, over every row (Spark, a client).

    A result's write is its ``written_at_us``: the wall clock when the pass that wrote it began (its
    commit follows within that pass's duration, so this errs early by up to one pass), minus
    bronze's arrival time of the tuple whose arrival emitted it. Only the stream's own results: an
    aggregate a repair changed later (``version`` > 1) is the repair's, late by design. (Files'
    modification times would not do: a repair's MERGE rewrites the files of unchanged windows too.)
    """
    code = r"""
import json, sys
from pyspark.sql import functions as F
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from outoforder.io.tables import BRONZE
spec, lake = json.loads(sys.argv[1]), sys.argv[2]
spark = get_spark(load_settings())
arrivals = delta.read(spark, BRONZE, lake).where("source = 'live'").select(
    F.col("arrival_seq").alias("_seq"), F.col("arrival_ts").alias("_arrival"))
out = {}
for dag, (table, seq_col) in spec.items():
    path = lake.rstrip("/") + "/" + table
    table_df = spark.read.format("delta").load(path).where("source = 'live'")
    if "version" in table_df.columns:  # the stream's own results, not the repairs' later versions
        table_df = table_df.where("version = 1")
    rows = (table_df
            .select((F.col("written_at_us") / 1e6).alias("_written"), F.col(seq_col).alias("_seq"))
            .where(F.col("_seq").isNotNull())
            .join(arrivals, "_seq")
            .select((F.col("_written") - F.col("_arrival") / 1e6).alias("f")))
    got = rows.agg(F.count("*"), F.percentile_approx("f", [0.5, 0.95], 10000)).first()
    q = got[1] or [None, None]
    out[dag] = {"rows": int(got[0]), "p50_s": q[0], "p95_s": q[1]}
print("FRESH" + json.dumps(out))
"""
    python = str(Path(env["OOO_SPARK_VENV"]) / "bin" / "python")
    done = run_command([python, "-c", code, json.dumps(FRESHNESS), str(lake)], env, "freshness")
    line = next(x for x in done.splitlines() if x.startswith("FRESH"))
    return dict(json.loads(line[len("FRESH") :]))


ACCOUNTING = r"""
import json, sys
from pyspark.sql import functions as F
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from pyspark.sql import Window
from outoforder.io.tables import BRONZE, INGEST_LOG, QUALITY_MEASURES, QUALITY_RUNS, QUARANTINE
lake = sys.argv[1]
spark = get_spark(load_settings())
def count(t):
    return delta.read(spark, t, lake).where("source = 'live'").count() if delta.exists(spark, t, lake) else 0
done = delta.read(spark, INGEST_LOG, lake).where("status = 'done' AND source = 'live'")
logged = done.agg(F.sum("rows_accepted"), F.sum("rows_quarantined"), F.sum("lines")).first()
runs = delta.read(spark, QUALITY_RUNS, lake).groupBy("suite", "success").count().collect()
verdicts = {}
for r in runs:
    verdicts.setdefault(r["suite"], {})["passed" if r["success"] else "failed"] = int(r["count"])
# every period or window judged, as its latest judgement says (a later run may judge it again)
newest = Window.partitionBy("measure", "job", "item").orderBy(F.col("validated_at_us").desc())
judged = (delta.read(spark, QUALITY_MEASURES, lake).where("source = 'live'")
    .withColumn("k", F.row_number().over(newest)).where("k = 1")
    .groupBy("measure").agg(F.count("*").alias("items"), F.sum(F.col("met").cast("int")).alias("met"))
    .collect()) if delta.exists(spark, QUALITY_MEASURES, lake) else []
print("ACCT" + json.dumps({"bronze": count(BRONZE), "quarantine": count(QUARANTINE),
    "logged_accepted": int(logged[0] or 0), "logged_quarantined": int(logged[1] or 0),
    "records_read": int(logged[2] or 0), "verdicts": verdicts,
    "judged": {r["measure"]: {"items": int(r["items"]), "met": int(r["met"] or 0)} for r in judged}}))
"""


def accounting(env: dict[str, str], lake: Path) -> dict[str, Any]:
    """Bronze and quarantine rows of the live source, what the ingest log recorded, every check's verdicts."""
    python = str(Path(env["OOO_SPARK_VENV"]) / "bin" / "python")
    done = run_command([python, "-c", ACCOUNTING, str(lake)], env, "accounting")
    line = next(x for x in done.splitlines() if x.startswith("ACCT"))
    return dict(json.loads(line[len("ACCT") :]))


def sent(producer_log: Path) -> tuple[int, float] | None:
    """The records the replay sent and in how many seconds, from its summary line (None: no summary)."""
    for line in reversed(producer_log.read_text().splitlines()):
        if "records into" in line and line.startswith("[produce]"):
            records = int(line.split("] ", 1)[1].split(" records")[0].replace(",", ""))
            return records, float(line.rsplit(" in ", 1)[1].split(" s", 1)[0])
    return None


def _rest_time(text: str) -> float:
    """An instant of Spark's REST API (``2026-11-26T07:11:50.124GMT``) as epoch seconds."""
    return datetime.strptime(text.removesuffix("GMT") + "+0000", "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def spark_work(ui_port: str) -> dict[str, Any]:
    """Where the shared server's work went: per stage, its runs' Spark jobs and executor CPU.

    From Spark's REST API: every job carries its client's tag (``outoforder-<stage>``) and session,
    one session per stage run. Only the jobs the server's status store still holds (the last few
    minutes of a long case) are counted; ``minutes`` says how many.
    """
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"

    def get(path: str) -> Any:
        with urllib.request.urlopen(f"{base}/{path}", timeout=60) as r:
            return json.loads(r.read())

    app = get("")[0]["id"]
    jobs = get(f"{app}/jobs")
    cpu_ns = {s["stageId"]: s["executorCpuTime"] for s in get(f"{app}/stages?status=complete")}
    per: dict[str, dict[str, Any]] = {}
    for job in jobs:
        tags = [t.rsplit("_Tag_outoforder-", 1) for t in job.get("jobTags", []) if "_Tag_outoforder-" in t]
        if not tags:
            continue
        session, stage = tags[0]
        p = per.setdefault(stage, {"sessions": set(), "jobs": 0, "cpu_s": 0.0, "wall_s": 0.0})
        p["sessions"].add(session)
        p["jobs"] += 1
        p["cpu_s"] += sum(cpu_ns.get(i, 0) for i in job["stageIds"]) / 1e9
        if job.get("completionTime"):
            p["wall_s"] += _rest_time(job["completionTime"]) - _rest_time(job["submissionTime"])
    times = [_rest_time(j["submissionTime"]) for j in jobs]
    out = {
        stage: {
            "runs": len(p["sessions"]),
            "jobs_per_run": round(p["jobs"] / len(p["sessions"]), 1),
            "executor_cpu_s_per_run": round(p["cpu_s"] / len(p["sessions"]), 2),
            "job_wall_s_per_run": round(p["wall_s"] / len(p["sessions"]), 1),
        }
        for stage, p in sorted(per.items())
    }
    return {"jobs": len(jobs), "minutes": round((max(times) - min(times)) / 60, 1) if times else 0,
            "by_stage": out}  # fmt: skip


def run_case(name: str, rate: float, minutes: int, work: Path) -> dict[str, Any]:
    """One live session of ``minutes`` at ``rate``, measured (module docstring)."""
    shutil.rmtree(work / "live" / "current", ignore_errors=True)
    env = case_env(work)
    log("live", f"{name}: starting live mode at {rate} x the game's rate for {minutes} min")
    t_start = time.time()
    sampler: Sampler | None = None
    try:
        _live(env, "start", "--rate", str(rate), "--minutes", str(minutes + 6))
        session = Path(os.path.realpath(work / "live" / "current"))
        sampler = Sampler(
            work / "spark-connect" / "supervisor.pid", session / "airflow" / "standalone.pid",
            session / SAMPLES,
        ).start()  # fmt: skip
        url = f"http://127.0.0.1:{env['OOO_AIRFLOW_PORT']}"
        api = Api(url, session / "airflow")
        replay_started = time.time()
        for minute in range(1, minutes + 1):
            time.sleep(max(0.0, replay_started + 60 * minute - time.time()))
            lags = run_lags(api, max(replay_started, time.time() - RECENT_S))
            last = {d: next((r["lag_s"] for r in reversed(rows) if r["lag_s"] is not None), None)
                    for d, rows in lags.items()}  # fmt: skip
            log("live", f"{name}: minute {minute}/{minutes}; newest lags (s): {last}")
        # the replay stops; the runs of its last minutes finish
        pid = int((session / "producer.pid").read_text())
        # the replay's process group (live.sh starts it with setsid), with killpg: procps-ng 4.0's
        # `kill -TERM -<pgid>` signals every process of the user (kill(-1)), this benchmark too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        stopped = time.time()
        deadline = stopped + DRAIN_S
        listed_after = False
        while time.time() < deadline:
            lags = run_lags(api, max(replay_started, stopped - RECENT_S))
            # the runs covering the replay's last records too: the first interval ending after it
            pending = [r for rows in lags.values() for r in rows if r["interval_end_s"] <= stopped + 60
                       and r["state"] in ("queued", "running")]  # fmt: skip
            # and an ingest that listed the topic after the replay's last records were delivered:
            # then bronze must hold every record sent (nothing in flight to excuse a shortfall)
            listed_after = any(r["interval_end_s"] >= stopped + FLUSH_S and r["committed_s"] is not None
                               for r in lags.get("ingest_kafka", []))  # fmt: skip
            if (
                not pending
                and listed_after
                and all(rows and rows[-1]["interval_end_s"] >= stopped for rows in lags.values())
            ):
                break
            time.sleep(10)
        lags = run_lags(api, replay_started)
        sampler.stop()
        lake = session / "lake"
        fresh = freshness(env, lake)
        acct = accounting(env, lake)
        try:
            work_done = spark_work(env["OOO_SPARK_CONNECT_UI_PORT"])
        except OSError as e:  # the figures above stand without it
            log("live", f"{name}: Spark's REST API did not answer ({e}): no per-stage breakdown")
            work_done = None
    finally:
        if sampler is not None:
            sampler.stop()
        _live(env, "stop")
    rec = summarize(name, rate, minutes, lags, fresh, acct, sampler.samples, sent(session / "producer.log"),
                    time.time() - t_start)  # fmt: skip
    rec["spark_work"] = work_done
    rec["listed_after_stop"] = listed_after
    return rec


def summarize(
    name: str,
    rate: float,
    minutes: int,
    lags: dict[str, list[dict[str, Any]]],
    fresh: dict[str, Any],
    acct: dict[str, Any],
    samples: list[dict[str, float]],
    replay: tuple[int, float] | None,
    seconds: float,
) -> dict[str, Any]:
    """The case's record: per DAG its lags and runs, the machine, the accounting."""
    per_dag = {}
    for dag, rows in lags.items():
        done = [r["lag_s"] for r in rows if r["lag_s"] is not None]
        states: dict[str, int] = {}
        for r in rows:
            states[r["state"]] = states.get(r["state"], 0) + 1
        per_dag[dag] = {
            "runs": len(rows),
            "states": states,
            "lag_mean_s": round(sum(done) / len(done), 1) if done else None,
            "lag_max_s": max(done) if done else None,
            "lag_trend": trend(done),
            "retried_runs": sum(1 for r in rows if (r["stage_tries"] or 1) > 1),
            "freshness": fresh.get(dag),
        }
    cpu = [s["cpu_share"] for s in samples]
    per_min: dict[str, float] = {}
    if len(samples) > 1 and "busy_cpu_s" in samples[0]:
        first, last = samples[0], samples[-1]
        span_min = (last["t_s"] - first["t_s"]) / 60
        for key in ("busy_cpu_s", "server_cpu_s", "airflow_cpu_s"):
            per_min[key.removesuffix("_cpu_s")] = round((last[key] - first[key]) / span_min, 1)
        per_min["rest"] = round(per_min["busy"] - per_min["server"] - per_min["airflow"], 1)
    peak = max(samples, key=lambda s: s["server_mb"], default=None)
    return {
        "stage": name,
        "rate": rate,
        "minutes": minutes,
        "records_sent": replay[0] if replay else None,
        # the replay's own pace: it starts before the measured minutes and ends after them
        "tuples_per_s": round(replay[0] / replay[1]) if replay and replay[1] > 0 else None,
        "per_dag": per_dag,
        "runs": lags,
        "cpu_share_mean": round(sum(cpu) / len(cpu), 3) if cpu else None,
        "server_mb_max": max((s["server_mb"] for s in samples), default=None),
        # each part's largest and its share at the server's peak (the parts peak at different times)
        "server_parts_mb_max": {
            k: max((s.get(f"server_{k}_mb", 0) for s in samples), default=None) for k in PARTS
        },
        "server_parts_at_peak_mb": None if peak is None else {k: peak.get(f"server_{k}_mb") for k in PARTS},
        "airflow_mb_max": max((s["airflow_mb"] for s in samples), default=None),
        "cpu_s_per_minute": per_min,
        "samples": samples,
        "accounting": acct,
        "seconds": round(seconds),
    }


def verdict(rec: dict[str, Any]) -> dict[str, Any]:
    """Where the case lands against the issue's targets."""
    lags_ok = all(
        d["lag_mean_s"] is not None and d["lag_mean_s"] <= TARGET_LAG_S for d in rec["per_dag"].values()
    )
    trend_ok = all(
        d["lag_trend"] is not None and d["lag_trend"] <= TARGET_TREND for d in rec["per_dag"].values()
    )
    fresh_ok = all(
        (d["freshness"] or {}).get("p95_s") is not None and d["freshness"]["p95_s"] <= TARGET_FRESH_P95_S
        for k, d in rec["per_dag"].items() if k != "ingest_kafka"
    )  # fmt: skip
    a = rec["accounting"]
    sent_n, landed = rec["records_sent"], a["bronze"] + a["quarantine"]
    nothing_lost: bool | None = sent_n is not None and sent_n == landed
    # fewer landed while the last ingest run has not ended: records in flight, not (yet) a loss
    last_ingest = (rec["runs"].get("ingest_kafka") or [{}])[-1].get("state")
    # or a benchmark that died in its drain: the replay's last minute was never ingested
    # (unless an ingest listed the topic after the replay stopped: then a shortfall is a loss)
    if (
        sent_n is not None
        and landed < sent_n
        and not rec.get("listed_after_stop")
        and (last_ingest in ("queued", "running") or rec.get("recovered_from"))
    ):
        nothing_lost = None
    checks_green = all(not v.get("failed") for v in a["verdicts"].values())
    judged = a.get("judged") or {}
    judged_ok = bool(judged) and all(j["items"] and j["met"] / j["items"] >= TARGET_JUDGED_MET
                                     for j in judged.values())  # fmt: skip
    server_mb, pace = rec.get("server_mb_max"), rec.get("tuples_per_s")
    server_ok = None if server_mb is None else server_mb <= TARGET_SERVER_MB  # None: not sampled
    rate_ok = pace is not None and pace >= TARGET_RATE_SHARE * rec.get("rate", 1.0) * GAME_RATE_PER_S
    return {"lag_ok": lags_ok, "trend_ok": trend_ok, "fresh_ok": fresh_ok, "nothing_lost": nothing_lost,
            "checks_green": checks_green, "judged_ok": judged_ok, "server_ok": server_ok,
            "rate_ok": rate_ok}  # fmt: skip


def _lost_verdict(nothing_lost: bool | None) -> str:
    if nothing_lost is None:
        return "not judged (the last ingest run had not ended, or never ran: the rest were in flight)"
    return "yes" if nothing_lost else "no"


def plot(records: list[dict[str, Any]], out: Path) -> None:
    """Per case: every DAG's lag by run, and the machine's CPU share and the server's memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(records), 2, figsize=(13, 4 * len(records)), squeeze=False)
    for row, rec in zip(axes, records, strict=True):
        left, right = row
        for dag, runs in rec["runs"].items():
            t0 = runs[0]["interval_end_s"] if runs else 0
            pts = [((r["interval_end_s"] - t0) / 60, r["lag_s"]) for r in runs if r["lag_s"] is not None]
            if pts:
                left.plot(*zip(*pts, strict=True), marker=".", label=dag)
        left.axhline(TARGET_LAG_S, color="grey", ls="--", lw=0.8)
        left.set(title=f"{rec['stage']}: lag per run ({rec['tuples_per_s'] or '?'} tuples/s)",
                 xlabel="minute of the run", ylabel="lag (s)")  # fmt: skip
        left.legend(fontsize=8)
        s = rec["samples"]
        right.plot(
            [x["t_s"] / 60 for x in s], [100 * x["cpu_share"] for x in s], lw=0.8, label="CPU busy (%)"
        )
        ax2 = right.twinx()
        ax2.plot([x["t_s"] / 60 for x in s], [x["server_mb"] for x in s], color="tab:red", lw=0.8,
                 label="server PSS (MB)")  # fmt: skip
        ax2.plot([x["t_s"] / 60 for x in s], [x["airflow_mb"] for x in s], color="tab:green", lw=0.8,
                 label="Airflow PSS (MB)")  # fmt: skip
        right.set(title=f"{rec['stage']}: the machine", xlabel="minute", ylabel="CPU busy (%)", ylim=(0, 100))
        ax2.set_ylabel("MB")
        right.legend(loc="upper left", fontsize=8)
        ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The report: the targets, per case and DAG the lag, trend, runs and freshness, the machine."""
    lines = [
        "# Live soak: the DAGs on a live stream, through Airflow's scheduler",
        "",
        f"`bash infra/bench.sh live` on {meta['machine']['date']} ({meta['machine']['cpus']} cores; each "
        "case names the commit it ran). Each case: live mode (`bash infra/live.sh start --rate R`) for "
        "the minutes shown, the DAGs unpaused and scheduled every minute, every stage a client of the "
        "shared Spark Connect server (local[2]). Lag: the stage task's end minus the end of the "
        "arrival interval its run covers. Freshness: when the stream stage wrote a result row (its "
        "pass's start) minus the arrival of the tuple that produced it. Trend: mean lag of the last "
        "tenth of the runs / the first tenth's.",
        "",
        f"Targets: at a tenth of the rate every DAG's mean lag ≤ {TARGET_LAG_S:g} s and not growing "
        f"(trend ≤ {TARGET_TREND}), results fresh within {TARGET_FRESH_P95_S:g} s at p95, nothing lost, "
        f"every check green (≥ {100 * TARGET_JUDGED_MET:g} % of the join's periods and of the windows "
        f"meeting their targets); at the full rate, the replay at ≥ {100 * TARGET_RATE_SHARE:g} % of its "
        f"rate and no lag growing; the Spark Connect server ≤ {TARGET_SERVER_MB:,} MB (PSS).",
        "",
    ]
    for rec in records:
        v = verdict(rec)
        a = rec["accounting"]
        judged = ", ".join(
            f"{m} {100 * j['met'] / j['items']:.1f} % of {j['items']:,}"
            for m, j in sorted((a.get("judged") or {}).items()) if j["items"]
        )  # fmt: skip
        checks = ", ".join(
            f"{k} {d.get('passed', 0)} passed/{d.get('failed', 0)} failed"
            for k, d in sorted(a["verdicts"].items())
        )
        lines += [
            f"## {rec['stage']}: {rec['tuples_per_s'] or '?'} tuples/s for {rec['minutes']} min "
            f"(commit {rec.get('commit', '?')})",
            "",
            *_recovered_note(rec),
            f"- mean lag within {TARGET_LAG_S:g} s: **{'yes' if v['lag_ok'] else 'no'}**; not growing: "
            f"**{'yes' if v['trend_ok'] else 'no'}**; fresh at p95 within {TARGET_FRESH_P95_S:g} s: "
            f"**{'yes' if v['fresh_ok'] else 'no'}**",
            f"- records sent {rec['records_sent'] if rec['records_sent'] is not None else '?'} = bronze "
            f"{a['bronze']:,} + quarantined {a['quarantine']:,}: **{_lost_verdict(v['nothing_lost'])}**",
            f"- checks: {checks or 'none ran'}",
            f"- judged: {judged or 'nothing'}: ≥ {100 * TARGET_JUDGED_MET:g} % met in each: "
            f"**{'yes' if v['judged_ok'] else 'no'}**",
            f"- the replay's pace {rec['tuples_per_s'] or '?'} tuples/s of "
            f"{rec['rate'] * GAME_RATE_PER_S:,.0f} asked: ≥ {100 * TARGET_RATE_SHARE:g} %: "
            f"**{'yes' if v['rate_ok'] else 'no'}**; server within {TARGET_SERVER_MB:,} MB: "
            f"**{ {True: 'yes', False: 'no', None: 'not sampled'}[v['server_ok']] }**",
        ]
        if rec["samples"]:
            lines.append(
                f"- machine: CPU busy {100 * (rec['cpu_share_mean'] or 0):.0f} % on average; Spark Connect "
                f"server at most {rec['server_mb_max']} MB, Airflow at most {rec['airflow_mb_max']} MB (PSS)"
            )
            peak, most = rec.get("server_parts_at_peak_mb"), rec.get("server_parts_mb_max")
            if peak and most and peak.get("jvm") is not None:
                lines.append(
                    "- the server's memory at its peak: "
                    + ", ".join(f"{k} {peak[k]:,} MB (at most {most[k]:,})" for k in PARTS)
                )
        per_min = rec.get("cpu_s_per_minute") or {}
        if per_min:
            lines.append(
                f"- CPU-s per minute (of {60 * meta['machine']['cpus']}): busy {per_min['busy']:g}, of which "
                f"the Spark Connect server (its JVM, Python workers, stage runner and the stages it forks) "
                f"{per_min['server']:g}, Airflow {per_min['airflow']:g}, the rest (Kafka, the replay, "
                f"the system) {per_min['rest']:g}"
            )
        lines.append("")
        rows = []
        for dag, d in rec["per_dag"].items():
            f = d["freshness"] or {}
            rows.append(
                {
                    "dag": dag,
                    "runs": d["runs"],
                    "states": ", ".join(f"{k} {n}" for k, n in sorted(d["states"].items())),
                    "lag_mean_s": d["lag_mean_s"],
                    "lag_max_s": d["lag_max_s"],
                    "lag_trend": d["lag_trend"],
                    "retried": d["retried_runs"],
                    "p50": f.get("p50_s"),
                    "p95": f.get("p95_s"),
                    "rows": f.get("rows"),
                }
            )
        lines.append(
            markdown_table(
                rows,
                [
                    ("dag", "DAG", ""),
                    ("runs", "runs", "d"),
                    ("states", "states", ""),
                    ("lag_mean_s", "lag mean (s)", ".1f"),
                    ("lag_max_s", "lag max (s)", ".1f"),
                    ("lag_trend", "trend", ".2f"),
                    ("retried", "retried", "d"),
                    ("p50", "fresh p50 (s)", ".1f"),
                    ("p95", "fresh p95 (s)", ".1f"),
                    ("rows", "result rows", ",d"),
                ],
            )
        )
        lines.append("")
        work = rec.get("spark_work")
        if work and work["by_stage"]:
            lines += [
                f"Spark's work per stage run, from the server's REST API (the last {work['jobs']:,} jobs "
                f"it holds, {work['minutes']:g} min): a run's Spark jobs, their executor CPU and their "
                "summed wall time (the rest of the server's CPU is planning, code generation, the JIT "
                "compiler and garbage collection).",
                "",
                markdown_table(
                    [{"stage": k, **v} for k, v in work["by_stage"].items()],
                    [
                        ("stage", "stage", ""),
                        ("runs", "runs", "d"),
                        ("jobs_per_run", "jobs per run", ".1f"),
                        ("executor_cpu_s_per_run", "executor CPU-s per run", ".2f"),
                        ("job_wall_s_per_run", "job wall s per run", ".1f"),
                    ],
                ),
                "",
            ]
    lines += ["![lag per run, CPU and memory](live.png)", ""]
    return "\n".join(lines)


def _recovered_note(rec: dict[str, Any]) -> list[str]:
    """The line saying a record was rebuilt from its session (:func:`recover`), if it was."""
    if not rec.get("recovered_from"):
        return []
    kept = "" if rec["samples"] else "; no CPU or memory samples were kept"
    return [f"- rebuilt from its session's folder (`{rec['recovered_from']}`): the benchmark died after the "
            f"replay ended{kept}"]  # fmt: skip


def _interrupted(signum: int, frame: object) -> None:
    del frame
    msg = f"signal {signum}"
    raise KeyboardInterrupt(msg)


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Run the live cases (``OOO_LIVE_CASES``, default both) and write the results."""
    del data_dir, spark_on
    signal.signal(signal.SIGTERM, _interrupted)  # a stopped benchmark stops its live session too
    signal.signal(signal.SIGINT, _interrupted)
    names = [n for n in os.environ.get("OOO_LIVE_CASES", ",".join(CASES)).split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        msg = f"OOO_LIVE_CASES: unknown cases {unknown}; known: {', '.join(CASES)}"
        raise StateError(msg)
    minutes = int(os.environ.get("OOO_LIVE_MINUTES", QUICK_MINUTES if quick else MINUTES))
    work = REPO_ROOT / ".local" / "bench" / "live"
    work.mkdir(parents=True, exist_ok=True)
    records, _, _ = earlier_results(out_dir / "live.json", set(names), "live")
    recovering = os.environ.get("OOO_LIVE_RECOVER")
    if recovering:  # a case whose benchmark died after its replay: its record from the session
        if len(names) != 1:
            msg = "OOO_LIVE_RECOVER rebuilds one case: name it in OOO_LIVE_CASES"
            raise StateError(msg)
        commit = os.environ.get("OOO_LIVE_RECOVER_COMMIT", "unknown")  # the code the session ran
        records.append({**recover(Path(recovering).resolve(), names[0], CASES[names[0]]), "commit": commit})
    for name in [] if recovering else names:
        commit = source_commit()  # the code the case ran, even if a commit lands while it runs
        records.append({**run_case(name, CASES[name], minutes, work), "commit": commit})
    order = list(CASES)
    records.sort(key=lambda r: order.index(r["stage"]))
    meta = {"machine": machine(), "minutes": minutes, "quick": quick}
    write_json(out_dir / "live.json", meta, records)
    (out_dir / "live.md").write_text(markdown(records, meta))
    plot(records, out_dir / "live.png")
    for rec in records:
        log("live", f"{rec['stage']}: {verdict(rec)}")
    return 0
