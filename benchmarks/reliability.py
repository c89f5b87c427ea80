"""Reliability run, crash recovery: every Spark stage killed with SIGKILL during its writes, then rerun.

For each stage (a CLI command, as an Airflow task runs it) the run

1. prepares the lake the stage starts from once (a replay in bronze; for the repairs, the stream
   stage done first);
2. runs the stage to completion on a copy, as a process, watching the Delta commits land (every
   ``_delta_log/NNN.json`` of the lake): that gives the reference tables and the commit times
   (the tests run this, the preparation and the reruns in their own process: :func:`run_here`);
3. per trial, on a fresh copy, starts the stage and kills its whole process group (Python driver,
   JVM, Python workers) with SIGKILL at a random point of its writes: after the k-th commit
   (k uniform over the reference's commits) plus a uniform share of the gap to the next one, so
   kills fall inside Parquet writes, between a stage's writes and inside a commit;
4. reruns the stage to completion on that lake and compares every table with the reference by
   content checksum (:func:`outoforder.io.delta.content_digest`: equal multisets of rows, so no
   result lost and none duplicated) and reads every table's Delta history (the log is readable).

``bash infra/bench.sh reliability [--quick]`` writes ``docs/benchmarks/reliability.json`` and
``.md``; ``--quick`` runs fewer trials per stage (the regular tests run one per stage of
:func:`crash_trials`, for a few stages).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import (
    DEFAULT_OUT,
    earlier_results,
    kafka_broker,
    log,
    machine,
    markdown_table,
    run_command,
    stage_command,
    write_json,
)
from outoforder.config import REPO_ROOT, Settings, load_settings
from outoforder.errors import StateError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# light disorder (a 50 ms mean delay for 30 % of the tuples): the arrival span stays close to the
# replay's length, so each run has few intervals and a trial takes about a minute
PRESET = "exponential:mean=0.05,late_prob=0.3"
SECONDS = 4.0
# the join's window, narrower than the main job's: the trials are about commits and reruns, and a
# run of the main job's query on a 1 s replay spent most of a trial producing pairs
JOIN_QUERY = ("--window-s", "0.05")
POLL_S = 0.02
# quickest first: the files are rewritten after each stage, so a run cut short keeps what it finished
STAGE_NAMES = (
    "ingest",
    "ingest-kafka",
    "theta-join",
    "join-repair",
    "aggregate-repair",
    "topk-stream",
    "join-stream",
    "aggregate-stream",
)
# the ingest-kafka trials read the replay back from a topic of a broker of their own (started by
# main): each trial's lake starts without the topic's batch, and the topic is only ever read
KAFKA_SOURCE = "crash-kafka"
KAFKA_TOPIC = "crash"
KAFKA_PARTITIONS = 3


@dataclass(frozen=True)
class Stage:
    """One stage as a command line, and the prepared lake it starts from."""

    name: str
    base: str  # "bronze", "joined" or "aggregated"
    args: tuple[str, ...]


def stages(source: str, extra_file: Path, event_range: tuple[int, int], newest: int) -> list[Stage]:
    """The Spark stages of the DAGs, on ``source`` (a small replay); a stream stage runs one pass."""
    window = 1_000_000
    lo, hi = event_range[0] // window * window, (event_range[1] // window + 1) * window
    return [
        Stage("ingest", "bronze", ("ingest", "--file", str(extra_file), "--reader", "soccer_synthetic",
                                   "--source", "synthetic/crash-ingest")),
        Stage("ingest-kafka", "bronze", ("ingest-kafka", "--source", KAFKA_SOURCE)),
        Stage("join-stream", "bronze", ("join-stream", "--source", source, *JOIN_QUERY)),
        Stage("join-repair", "joined", ("join-repair", "--source", source, "--until", str(newest),
                                        *JOIN_QUERY)),
        Stage("aggregate-stream", "bronze", ("aggregate-stream", "--source", source)),
        Stage("aggregate-repair", "aggregated", ("aggregate-repair", "--source", source, "--force")),
        Stage("topk-stream", "bronze", ("topk-stream", "--source", source,
                                        "--streams", "team_a,team_b", "--window-s", "1", "--slide-s", "0.5",
                                        "--initial-cache-s", "0.5", "--horizon-s", "1", "--n", "10")),
        Stage("theta-join", "bronze", ("theta-join", "--source", source, "--start", str(lo), "--end", str(hi),
                                       "--streams", "ball,team_a", "--column", "x",
                                       "--predicates", "band:0.01", "--window-s", "1")),
    ]  # fmt: skip


def commits(lake: Path) -> int:
    """How many Delta commits the lake's tables hold (files ``_delta_log/<version>.json``)."""
    n = 0
    for folder, dirs, files in os.walk(lake):
        if folder.endswith("_delta_log"):
            n += sum(1 for f in files if f.endswith(".json") and f[:-5].isdigit())
            dirs.clear()
    return n


@dataclass
class Run:
    """One stage process: exit status, output tail, and when each new commit appeared (s from start)."""

    rc: int | None
    seconds: float
    commit_times: list[float]
    killed_at: float | None = None
    tail: str = ""


def run_stage(
    stage: Stage,
    lake: Path,
    env: dict[str, str],
    config: Path,
    kill: Callable[[int, float], bool] | None = None,
) -> Run:
    """Run ``stage`` on ``lake`` as its own process group; ``kill(commits_seen, t)`` says when to SIGKILL."""
    cmd = stage_command(config, *stage.args)
    log_path = lake.parent / f"{lake.name}.log"
    before = commits(lake)
    times: list[float] = []
    t0 = time.monotonic()
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            cmd, env={**env, "OOO_LAKE_ROOT": str(lake)}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        killed_at = None
        while proc.poll() is None:
            seen = commits(lake) - before
            now = time.monotonic() - t0
            times.extend([now] * (seen - len(times)))
            if kill is not None and kill(seen, now):
                os.killpg(proc.pid, signal.SIGKILL)
                killed_at = now
                proc.wait()
                break
            time.sleep(POLL_S)
    _reap(proc.pid)
    seconds = time.monotonic() - t0
    final = commits(lake) - before
    times.extend([seconds] * (final - len(times)))
    tail = log_path.read_text()[-3000:]
    return Run(None if killed_at is not None else proc.returncode, seconds, times, killed_at, tail)


def _reap(pgid: int) -> None:
    """Wait until no process of the group is left (the JVM may outlive the driver by a moment)."""
    for _ in range(200):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)


def run_here(stage: Stage, lake: Path, env: Mapping[str, str], config: Path) -> Run:
    """Run ``stage`` on ``lake`` to completion in this process, on its active Spark session.

    What :func:`run_stage` does without a process of its own (no JVM to start): the same command
    line through the CLI's entry point, with ``env``'s settings, its output in the same log file,
    the commits watched from a thread. For the runs that are not killed (the reference, the
    preparation, the rerun) where the session is warm already: the tests'.
    """
    from outoforder.stages.cli import main

    log_path = lake.parent / f"{lake.name}.log"
    before = commits(lake)
    times: list[float] = []
    done = threading.Event()
    t0 = time.monotonic()

    def watch() -> None:
        while not done.wait(POLL_S):
            seen = commits(lake) - before
            times.extend([time.monotonic() - t0] * (seen - len(times)))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with (
        log_path.open("w") as out,
        redirect_stdout(out),
        redirect_stderr(out),
        _environment({**env, "OOO_LAKE_ROOT": str(lake)}),
        _logging_kept(),
    ):
        try:
            rc = main(["--config", str(config), *stage.args])
        except SystemExit as e:  # argparse's errors
            rc = e.code if isinstance(e.code, int) else 2
        except Exception:  # a bug: as the process would, exit 1 with its traceback
            traceback.print_exc()
            rc = 1
        finally:
            done.set()
            watcher.join()
    seconds = time.monotonic() - t0
    times.extend([seconds] * (commits(lake) - before - len(times)))
    return Run(rc, seconds, times, None, log_path.read_text()[-3000:])


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env``'s values that differ from this process's environment, for the block (settings read them)."""
    changed = {k: os.environ.get(k) for k, v in env.items() if os.environ.get(k) != v}
    os.environ.update({k: env[k] for k in changed})
    try:
        yield
    finally:
        for k, v in changed.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _logging_kept() -> Iterator[None]:
    """The package logger's handlers, level and propagation as they were (the CLI sets its own)."""
    logger = logging.getLogger("outoforder")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        yield
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def kill_plan(reference: list[float], rng: random.Random) -> tuple[int, float, Callable[[int, float], bool]]:
    """A random kill point within the reference's writes: after commit k, u of the way to commit k + 1."""
    n = len(reference)
    if n == 0:
        msg = "the stage committed nothing in its reference run: nothing to interrupt"
        raise StateError(msg)
    k = rng.randrange(n)
    u = rng.random()
    gap = reference[k] - (reference[k - 1] if k else 0.0)
    state: dict[str, float] = {}

    def kill(seen: int, now: float) -> bool:
        if seen < k:
            return False
        state.setdefault("since", now)
        return now - state["since"] >= u * gap

    return k, u, kill


def digests(spark: SparkSession, lake: Path) -> dict[str, dict[str, object]]:
    """Every table's rows and content digest; reading each table's history proves its log readable."""
    from delta.tables import DeltaTable

    from outoforder.io import delta
    from outoforder.io.tables import ALL_TABLES

    for t in ALL_TABLES:
        if delta.exists(spark, t, lake):
            DeltaTable.forPath(spark, t.path(lake)).history().count()
    return delta.content_digests(spark, lake)


@dataclass
class Prepared:
    """The lakes trials start from, the replay's source and what the stage list needs."""

    work: Path
    config: Path
    env: dict[str, str]
    lakes: dict[str, Path]
    stages: list[Stage]
    in_process: bool = False  # the runs not killed run in this process (:func:`run_here`)

    def complete(self, stage: Stage, lake: Path) -> Run:
        """An uninterrupted run of ``stage`` on ``lake``, where the runs not killed run."""
        run = run_here if self.in_process else run_stage
        return run(stage, lake, self.env, self.config)


def _cli(env: dict[str, str], config: Path, lake: Path, *args: str, in_process: bool = False) -> None:
    if not in_process:
        run_command(stage_command(config, *args), {**env, "OOO_LAKE_ROOT": str(lake)}, " ".join(args))
        return
    done = run_here(Stage(args[0], "", args), lake, env, config)
    if done.rc != 0:
        msg = f"{' '.join(args)} failed ({done.rc}): {done.tail}"
        raise StateError(msg)


def prepare(
    spark: SparkSession,
    work: Path,
    names: tuple[str, ...],
    seconds: float = SECONDS,
    kafka_bootstrap: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    in_process: bool = False,
) -> Prepared:
    """Ingest the replay into a base lake, and the stream stages' outputs the repairs start from.

    With ``ingest-kafka`` among ``names``, the replay is also produced into a topic of the broker at
    ``kafka_bootstrap`` (the ``produce`` command), and the config declares the source reading it.
    ``spark_conf`` goes into the config's ``[spark.conf]`` (every stage process's SQL settings).
    ``in_process``: the preparation, and later every run that is not killed, runs in this process
    on its session (:func:`run_here`), which must have those SQL settings already.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE
    from outoforder.stages.ingest.replay import make_replay, replay_source

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = work / "reliability.toml"
    sql = "".join(f'"{k}" = "{v}"\n' for k, v in (spark_conf or {}).items())
    config.write_text(
        f'[demo]\nsynthetic_seconds = {seconds}\npreset = "{PRESET}"\n'
        '[quality]\non_violation = "warn"\n[spark]\nshuffle_partitions = 2\n'
        "[ingest]\nbatch_rows = 2000\n"  # several batch commits per file: more places to kill ingest
        + (f"[spark.conf]\n{sql}" if sql else "")
    )
    env = {**os.environ, "OOO_WORK_DIR": str(work), "OOO_REPORTS_DIR": str(work / "reports")}
    bronze = work / "base-bronze"
    log("reliability", f"ingesting a {seconds:g} s replay ({PRESET}) into {bronze}")
    _cli(env, config, bronze, "demo", "--steps", "replay", in_process=in_process)
    source = replay_source(PRESET, seconds, 7)
    # a second replay for the ingest stage's trials (generating it takes a while: only when needed)
    extra = make_replay(work / "extra", PRESET, seconds, 8).path if "ingest" in names else work / "none"
    row = (
        delta.read(spark, BRONZE, bronze)
        .where(F.col("source") == source)
        .agg(F.min("event_ts"), F.max("event_ts"), F.max("arrival_ts"))
        .first()
    )
    if row is None or row[0] is None:
        msg = f"the replay {source} is not in bronze"
        raise StateError(msg)
    if "ingest-kafka" in names:
        if kafka_bootstrap is None:
            msg = "the ingest-kafka trials need a broker (kafka_bootstrap)"
            raise StateError(msg)
        from outoforder.sources.sensors import SYNTHETIC_STREAMS
        from outoforder.stages.ingest.produce import declaration_toml

        env["OOO_KAFKA_BOOTSTRAP"] = kafka_bootstrap
        log("reliability", f"producing {source} into topic {KAFKA_TOPIC!r} ({kafka_bootstrap})")
        _cli(env, config, bronze, "produce", "--source", source, "--topic", KAFKA_TOPIC,
             "--partitions", str(KAFKA_PARTITIONS))  # fmt: skip
        streams = tuple(sorted(set(SYNTHETIC_STREAMS.values())))  # what the replay's sensors give
        with config.open("a") as f:
            f.write(declaration_toml(KAFKA_SOURCE, KAFKA_TOPIC, streams, (int(row[0]), int(row[1]))))
    by_name = {s.name: s for s in stages(source, extra, (int(row[0]), int(row[1])), int(row[2]) + 1)}
    unknown = sorted(set(names) - set(by_name))
    if unknown:
        msg = f"unknown stage {', '.join(unknown)} (stages: {', '.join(by_name)})"
        raise StateError(msg)
    chosen = [by_name[n] for n in names]
    lakes = {"bronze": bronze}
    # the aggregates' K capped at 0 for the repair's lake: every tuple that comes after its window
    # closed is a late one, so the repair has late tuples to fold in even on a 1 s replay (K starts
    # at 1 s, which on so short a replay leaves the ledger empty)
    for base, before, more in (
        ("joined", "join-stream", ()),
        ("aggregated", "aggregate-stream", ("--latency-bound-s", "0")),
    ):
        if any(s.base == base for s in chosen):
            lakes[base] = work / f"base-{base}"
            shutil.copytree(bronze, lakes[base])
            log("reliability", f"preparing the {base} lake ({before})")
            _cli(env, config, lakes[base], *by_name[before].args, *more, in_process=in_process)
    return Prepared(work, config, env, lakes, chosen, in_process)


def crash_trials(
    spark: SparkSession, prep: Prepared, stage: Stage, trials: int, seed: int = 0
) -> list[dict[str, Any]]:
    """The reference run of ``stage``, then ``trials`` kill-and-rerun trials against it."""
    rng = random.Random(f"{stage.name}-{seed}")
    ref_lake = prep.work / f"{stage.name}-reference"
    shutil.copytree(prep.lakes[stage.base], ref_lake)
    ref = prep.complete(stage, ref_lake)
    if ref.rc != 0:
        msg = f"the reference run of {stage.name} failed ({ref.rc}): {ref.tail}"
        raise StateError(msg)
    expected = digests(spark, ref_lake)
    log(
        "reliability",
        f"{stage.name}: reference {ref.seconds:.0f} s, {len(ref.commit_times)} commits "
        f"(first at {ref.commit_times[0] if ref.commit_times else 0:.1f} s)",
    )
    records = []
    for i in range(trials):
        lake = prep.work / f"{stage.name}-trial{i}"
        shutil.copytree(prep.lakes[stage.base], lake)
        k, u, kill = kill_plan(ref.commit_times, rng)
        crashed = run_stage(stage, lake, prep.env, prep.config, kill)
        at_kill = len(crashed.commit_times)
        rerun = prep.complete(stage, lake)
        got = digests(spark, lake) if rerun.rc == 0 else {}
        differ = sorted(t for t in expected if got.get(t) != expected[t])
        rec = {
            "stage": stage.name,
            "trial": i,
            "reference_commits": len(ref.commit_times),
            "kill_after_commit": k,
            "kill_share_of_gap": round(u, 3),
            "killed": crashed.killed_at is not None,
            "killed_at_s": None if crashed.killed_at is None else round(crashed.killed_at, 2),
            "commits_before_kill": at_kill,
            "rerun_rc": rerun.rc,
            "rerun_s": round(rerun.seconds, 1),
            "rerun_commits": len(rerun.commit_times),
            "same_tables": rerun.rc == 0 and not differ,
            "differing_tables": differ,
        }
        if rerun.rc != 0:
            rec["rerun_tail"] = rerun.tail
        records.append(rec)
        log(
            "reliability",
            f"{stage.name} trial {i + 1}/{trials}: killed after {at_kill}/{len(ref.commit_times)} commits "
            f"at {rec['killed_at_s']} s; rerun rc {rerun.rc} in {rerun.seconds:.0f} s; "
            f"same tables: {rec['same_tables']}" + (f" (differ: {', '.join(differ)})" if differ else ""),
        )
        shutil.rmtree(lake, ignore_errors=True)
    shutil.rmtree(ref_lake, ignore_errors=True)
    return records


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per stage: trials, kills that landed, reruns that completed, identical outcomes."""
    rows = []
    for name in dict.fromkeys(r["stage"] for r in records):
        rs = [r for r in records if r["stage"] == name]
        rows.append(
            {
                "stage": name,
                "trials": len(rs),
                "killed": sum(r["killed"] for r in rs),
                "kill_points": f"{min(r['commits_before_kill'] for r in rs)}–"
                f"{max(r['commits_before_kill'] for r in rs)} of {rs[0]['reference_commits']} commits",
                "reruns_ok": sum(r["rerun_rc"] == 0 for r in rs),
                "identical": sum(r["same_tables"] for r in rs),
                "median_rerun_s": sorted(r["rerun_s"] for r in rs)[len(rs) // 2],
            }
        )
    return rows


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Crash trials for every stage; writes docs/benchmarks/reliability.json and .md."""
    del data_dir, spark_on
    from outoforder.spark.session import get_spark

    trials = int(os.environ.get("OOO_CRASH_TRIALS", 3 if quick else 20))
    seconds = float(os.environ.get("OOO_CRASH_SECONDS", SECONDS))
    names = tuple(n for n in os.environ.get("OOO_CRASH_STAGES", "").split(",") if n)
    settings: Settings = load_settings()
    spark = get_spark(settings, app_name="outoforder-reliability")
    work = REPO_ROOT / ".local" / "bench" / "reliability"
    chosen = names or STAGE_NAMES
    with ExitStack() as services:
        broker = None
        if "ingest-kafka" in chosen:
            broker = services.enter_context(kafka_broker(work.with_name("reliability-kafka")))
        return _trials(spark, prepare(spark, work, chosen, seconds, broker), out_dir, trials, seconds, quick)


def _trials(
    spark: SparkSession, prep: Prepared, out_dir: Path, trials: int, seconds: float, quick: bool
) -> int:
    """Every chosen stage's trials, the report rewritten after each stage."""
    records: list[dict[str, Any]] = []
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        **machine(),
        "replay": f"{PRESET}, {seconds:g} s of synthetic play, one pass per stream stage run",
        "trials_per_stage": trials,
    }
    rerun = {s.name for s in prep.stages}
    earlier, earlier_meta, replaced = earlier_results(out_dir / "reliability.json", rerun, "reliability")
    meta["trials_from_earlier_runs"] = len(earlier)
    # notes on a stage's trials (written by hand, in the JSON) go with them, until the stage is rerun
    meta["notes"] = {k: v for k, v in earlier_meta.get("notes", {}).items() if k not in rerun}
    meta["superseded"] = superseded(earlier_meta, replaced)
    stamp = {"commit": meta["commit"], "date": meta["date"]}
    for stage in prep.stages:
        records.extend({**r, **stamp} for r in crash_trials(spark, prep, stage, trials))
        meta["minutes"] = round((time.monotonic() - t0) / 60, 1)
        done = {r["stage"] for r in earlier + records}
        meta["stages_done"] = [n for n in STAGE_NAMES if n in done]
        meta["stages_not_run"] = [n for n in STAGE_NAMES if n not in done]
        _write(out_dir, meta, earlier + records, quick)
    log("reliability", f"written {out_dir / 'reliability.json'} and {out_dir / 'reliability.md'}")
    return 0 if all(r["same_tables"] for r in records) else 1


def superseded(earlier_meta: dict[str, Any], replaced: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The earlier runs' trials of the stages this run repeats, kept (with their notes) in the meta.

    A rerun after a fix must not erase the trials that found the bug: the report lists both.
    """
    kept: list[dict[str, Any]] = list(earlier_meta.get("superseded", []))
    notes = earlier_meta.get("notes", {})
    for row in summarize(replaced):
        name = row["stage"]
        rs = [r for r in replaced if r["stage"] == name]
        kept.append(
            {
                "stage": name,
                "commit": rs[0].get("commit", "unknown"),
                "date": rs[0].get("date", earlier_meta.get("date", "unknown")),
                "trials": row["trials"],
                "identical": row["identical"],
                "note": notes.get(name, ""),
                "records": rs,
            }
        )
    return kept


def _write(out_dir: Path, meta: dict[str, Any], records: list[dict[str, Any]], quick: bool) -> None:
    """The files as they stand after each stage: a run stopped early keeps its finished stages."""
    write_json(out_dir / "reliability.json", meta, records)
    table = markdown_table(
        summarize(records),
        [
            ("stage", "stage", ""),
            ("trials", "trials", "d"),
            ("killed", "killed mid-run", "d"),
            ("kill_points", "kill points (commits done)", ""),
            ("reruns_ok", "reruns completed", "d"),
            ("identical", "tables identical to an uninterrupted run", "d"),
            ("median_rerun_s", "median rerun (s)", ".0f"),
        ],
    )
    missing = meta["stages_not_run"]
    (out_dir / "reliability.md").write_text(
        "# Reliability: crash recovery\n\n"
        f"`bash infra/bench.sh reliability{' --quick' if quick else ''}` on {meta['date']} "
        f"({meta['minutes']} min"
        + (
            f"; with {meta['trials_from_earlier_runs']} trials kept from earlier runs"
            if meta["trials_from_earlier_runs"]
            else ""
        )
        + "). Each stage runs as its own process on a copy of a prepared lake "
        f"({meta['replay']}) and is killed with SIGKILL (its whole process group: driver, JVM, Python "
        "workers) at a random point of its writes: after a random one of the commits an uninterrupted "
        "run makes, plus a random share of the time to the next. The stage is then rerun to "
        "completion and every table of the lake is compared with the uninterrupted run's by content "
        "checksum (equal multisets of rows: nothing lost, nothing duplicated); every table's Delta "
        "history is read.\n\n"
        f"{table}\n\n"
        + "".join(
            f"**{name}:** {meta['notes'][name]}\n\n" for name in STAGE_NAMES if name in meta.get("notes", {})
        )
        + (f"**Not run in this run:** {', '.join(missing)}.\n\n" if missing else "")
        + (
            "## Earlier trials replaced by a rerun\n\n"
            + "".join(
                f"- **{old['stage']}** at commit {old['commit']} ({old['date']}): "
                f"{old['identical']} of {old['trials']} identical."
                + (f" {old['note']}" if old["note"] else "")
                + "\n"
                for old in meta.get("superseded", [])
            )
            + "\n"
            if meta.get("superseded")
            else ""
        )
        + "Per-trial records: `reliability.json`.\n"
    )
