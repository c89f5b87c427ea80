"""What every benchmark shares: where results go, how they are written, how progress is shown."""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from outoforder.config import REPO_ROOT

DEFAULT_OUT = REPO_ROOT / "docs" / "benchmarks"
SAMPLE_S = 0.2  # how often MemorySampler reads /proc


def run_command(cmd: list[str], env: dict[str, str], what: str) -> str:
    """Run a command to completion; its stdout, or a StateError with the tails of both streams."""
    from outoforder.errors import StateError

    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        msg = f"{what} failed ({done.returncode}): {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        raise StateError(msg)
    return done.stdout


_log = logging.getLogger(__name__)


@contextmanager
def kafka_broker(folder: Path) -> Iterator[str]:
    """A fresh single-node broker (``infra/kafka.sh``) on free loopback ports; yields its bootstrap.

    Its data and logs go to ``folder`` (emptied first), so a benchmark never touches the user's
    broker on the default port; it is stopped on the way out, whatever happened.
    """
    import shutil

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
    shutil.rmtree(folder, ignore_errors=True)
    env = {
        **os.environ,
        "OOO_KAFKA_PORT": str(ports[0]),
        "OOO_KAFKA_CONTROLLER_PORT": str(ports[1]),
        "OOO_KAFKA_DATA": str(folder),
    }
    script = ["bash", str(REPO_ROOT / "infra" / "kafka.sh")]
    try:
        log("kafka", f"starting a broker on 127.0.0.1:{ports[0]} ({folder})")
        run_command([*script, "start"], env, "infra/kafka.sh start")
        yield f"127.0.0.1:{ports[0]}"
    finally:
        subprocess.run([*script, "stop"], env=env, capture_output=True, check=False, timeout=120)


def stage_command(config: Path, *args: str) -> list[str]:
    """``python -m outoforder.stages --config CONFIG ARGS`` with the Spark venv's interpreter."""
    python = os.environ.get("PYSPARK_PYTHON") or "python"
    return [python, "-m", "outoforder.stages", "--config", str(config), *args]


def log(tag: str, message: str) -> None:
    """One progress line with the wall-clock time (benchmarks run for minutes)."""
    _log.info("[%s] %s %s", tag, time.strftime("%H:%M:%S"), message)


def machine() -> dict[str, Any]:
    """The facts a reader needs to weigh the figures."""
    import os

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "commit": source_commit(),
    }


def write_json(path: Path, meta: dict[str, Any], records: Sequence[dict[str, Any]]) -> Path:
    """``{"meta": ..., "records": [...]}``, one record per measured case."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "records": list(records)}, indent=1, default=str))
    return path


def source_commit() -> str:
    """The repository's commit the code runs from (``+dirty`` with uncommitted changes), or ``unknown``.

    Changes to the prose (``docs``, the README, the reports under ``docs/benchmarks``) do not count:
    the commit names the code a figure came from.

    Benchmarks split over several runs keep each record's commit, so a figure names its code.
    """
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(  # the reports, written as they run, and the prose are not code
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no", "--", ".",
             ":(exclude)docs", ":(exclude)README.md"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"  # not a git checkout (an sdist, a copied folder): the figures still stand
    return head + ("+dirty" if dirty else "")


def earlier_results(
    path: Path, rerun: set[str], tag: str
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """An earlier run's results in ``path``: (records kept, meta, records replaced).

    Kept are its records for the stages this run does not repeat; replaced, those it repeats.
    Long benchmarks can then be split over several runs: each rewrites its own stages' figures.
    """
    from outoforder.errors import StateError

    if not path.exists():
        return [], {}, []
    try:
        got = json.loads(path.read_text())
        kept = [r for r in got["records"] if r["stage"] not in rerun]
        replaced = [r for r in got["records"] if r["stage"] in rerun]
        meta: dict[str, Any] = got["meta"]
    except (ValueError, KeyError, TypeError) as e:
        msg = f"{path} is not a {tag} result ({e}); move it away to start afresh"
        raise StateError(msg) from e
    if kept:
        stages = ", ".join(dict.fromkeys(r["stage"] for r in kept))
        log(tag, f"keeping {len(kept)} records of earlier runs ({stages})")
    return kept, meta, replaced


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """A Markdown table from records; ``columns`` are (key, heading, format spec)."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = []
    for r in rows:
        cells = []
        for key, _, fmt in columns:
            v = r.get(key)
            cells.append("–" if v is None else format(v, fmt) if fmt else str(v))
        body.append("| " + " | ".join(cells) + " |")
    return "\n".join([head, rule, *body])


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from each process's parent in /proc/<pid>/stat)."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue  # ended while we looked
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        frontier += kids
    return found


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """CPU seconds the process used, with those of its children that ended and it waited for.

    Summed over a process tree, a short-lived child counts once: while it runs as itself, after
    it ends in its parent's children's time (one that no process waits for is not counted).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0  # it ended while we looked
    utime, stime, cutime, cstime = (int(x) for x in stat.rsplit(")", 1)[1].split()[11:15])
    return (utime + stime + cutime + cstime) / CLOCK_TICKS


def _memory_bytes(pid: int) -> int:
    """The process's proportional set size (PSS), or its resident set where the kernel lacks PSS.

    PSS splits each shared page between the processes that map it, so a sum over a process tree
    counts it once: the JVM forking a helper would double its resident set, not its PSS.
    """
    for name, field in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
        except OSError:
            continue  # no such file here, or the process ended
    return 0


class MemorySampler:
    """Resident memory of this process and of its descendants, sampled in a thread.

    ``peak()`` gives the largest values since the last ``reset()``; ``trace`` every sample as
    (seconds since start, driver bytes, descendants bytes).
    """

    def __init__(self, every_s: float = SAMPLE_S) -> None:
        self.every_s = every_s
        self.trace: list[tuple[float, int, int]] = []
        self._peak = (0, 0, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        kids: list[int] = []
        n = 0
        while not self._stop.is_set():
            if n % 25 == 0:  # the process tree changes rarely (Python workers come and go)
                kids = _descendants(me)
            n += 1
            driver, others = _memory_bytes(me), sum(_memory_bytes(k) for k in kids)
            with self._lock:
                self.trace.append((time.monotonic() - self._t0, driver, others))
                a, b, c = self._peak
                self._peak = (max(a, driver), max(b, others), max(c, driver + others))
            self._stop.wait(self.every_s)

    def start(self) -> MemorySampler:
        """Start sampling (returns self)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        self._thread.join()

    def reset(self) -> None:
        """Start a new peak (the trace keeps every sample)."""
        with self._lock:
            self._peak = (0, 0, 0)

    def peak(self) -> tuple[int, int, int]:
        """(driver, descendants, both together) in bytes."""
        with self._lock:
            return self._peak


def spark_rest(spark: Any, path: str) -> Any:
    """One answer of Spark's REST API about the session's application (None with its UI off).

    Benchmarks read Spark's status (executors' and stages' metrics) here rather than through
    py4j, so that they measure a Spark Connect server's application as well as a classic one.
    """
    from outoforder.spark.session import is_remote

    if is_remote(spark):
        if spark.conf.get("spark.ui.enabled", "true") != "true":
            return None
        base = f"http://127.0.0.1:{spark.conf.get('spark.ui.port', '4040')}"
        app = spark.conf.get("spark.app.id")
    else:
        sc = spark.sparkContext
        if not sc.uiWebUrl:
            return None
        base, app = sc.uiWebUrl, sc.applicationId
    with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/{path}", timeout=30) as r:
        return json.loads(r.read())


def with_spark_ui(settings: Any) -> Any:
    """``settings`` with Spark's UI on (its REST API is :func:`spark_rest`'s source)."""
    import dataclasses

    spark = dataclasses.replace(settings.spark, conf={**settings.spark.conf, "spark.ui.enabled": "true"})
    return dataclasses.replace(settings, spark=spark)
