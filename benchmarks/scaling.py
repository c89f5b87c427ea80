"""Scaling: the stream-join and aggregate stages on local Spark and on a standalone cluster of 1 or 2 workers.

Every candidate runs the same two stages (the main job's steps ``stream-join`` and ``aggregates``:
interval runs with state in Delta, checks and repairs) on its own copy of one lake holding the
ingested replay, as a separate process, exactly as Airflow would start it (``python -m
outoforder.stages demo --steps …``, master from ``OOO_SPARK_MASTER``). The cluster is the loopback
one of ``infra/spark-cluster.sh``, restarted per size. Outputs are compared by content checksum
(:func:`outoforder.io.delta.content_digest`): every candidate must produce the same tables.

Caveat, stated in the report: the machine has 2 cores, so "2 workers x 1 core" adds no hardware;
the figures show the cost of distribution (task scheduling, shuffles over loopback, executors
apart from the driver) at equal hardware, not a speed-up from more machines.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    DEFAULT_OUT,
    log,
    machine,
    markdown_table,
    run_command,
    stage_command,
    write_json,
)
from outoforder.config import REPO_ROOT

STEPS = ("stream-join", "aggregates")
CHECKED = (
    "gold/join_results",
    "silver/join_state",
    "gold/agg_results",
    "silver/agg_state",
    "gold/agg_repairs",
    "silver/agg_ledger",
)


@dataclass(frozen=True)
class Candidate:
    """Where the stages run: local[n], or the cluster with ``workers`` x ``cores``."""

    name: str
    master: str | None  # None: the cluster
    workers: int = 0
    cores: int = 0


CANDIDATES = (
    Candidate("local[2]", "local[2]"),
    Candidate("cluster 1 worker x 1 core", None, 1, 1),
    Candidate("cluster 1 worker x 2 cores", None, 1, 2),
    Candidate("cluster 2 workers x 1 core", None, 2, 1),
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster(
    folder: Path, env: dict[str, str], workers: int, cores: int
) -> tuple[list[str], dict[str, str], str]:
    """(Re)start the loopback cluster of ``infra/spark-cluster.sh`` on free ports, state in ``folder``.

    Returns its command (``[*command, "stop"]`` stops it), the environment it needs and its master URL.
    """
    cenv = {
        **env,
        "OOO_SPARK_MASTER_PORT": str(_free_port()),
        "OOO_SPARK_MASTER_UI_PORT": str(_free_port()),
        "OOO_SPARK_WORKER_UI_PORT": "0",
        "OOO_SPARK_CLUSTER_DIR": str(folder),
    }
    command = ["bash", str(REPO_ROOT / "infra" / "spark-cluster.sh")]
    run_command([*command, "stop"], cenv, "stopping the cluster")
    size = ["--workers", str(workers), "--cores", str(cores), "--memory", "3g"]
    run_command([*command, "start", *size], cenv, "starting the cluster")
    master = run_command([*command, "env"], cenv, "cluster env").split("'")[1]
    return command, cenv, master


def _stages(env: dict[str, str], config: Path, *args: str) -> str:
    return run_command(stage_command(config, *args), env, " ".join(args))


def _checksums(env: dict[str, str], config: Path) -> dict[str, Any]:
    out = _stages(env, config, "checksum", "--json", "--tables", *CHECKED)
    line = next(ln for ln in out.splitlines() if ln.startswith("CHECKSUMS"))
    return dict(json.loads(line[len("CHECKSUMS") :]))


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Run every candidate; write docs/benchmarks/scaling.json and .md."""
    del data_dir, spark_on
    seconds = 8.0 if quick else 20.0
    work = REPO_ROOT / ".local" / "bench" / "scaling"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = work / "bench.toml"
    config.write_text(
        f'[demo]\nsynthetic_seconds = {seconds}\npreset = "hpm_game1"\n[quality]\non_violation = "warn"\n'
    )
    base = {**os.environ, "OOO_WORK_DIR": str(work), "OOO_REPORTS_DIR": str(work / "reports")}
    log("scaling", f"ingesting a {seconds:g} s replay (hpm_game1) into {work / 'lake'}")
    _stages({**base, "OOO_LAKE_ROOT": str(work / "lake")}, config, "demo", "--steps", "replay")
    records: list[dict[str, Any]] = []
    cluster: tuple[list[str], dict[str, str], str] | None = None
    reference: dict[str, Any] | None = None
    for c in CANDIDATES:
        lake = work / f"lake-{len(records)}"
        shutil.copytree(work / "lake", lake)
        env = {**base, "OOO_LAKE_ROOT": str(lake)}
        if c.master is None:
            cluster = start_cluster(work / "spark-cluster", base, c.workers, c.cores)
            master = cluster[2]
        else:
            master = c.master
        env["OOO_SPARK_MASTER"] = master
        rec: dict[str, Any] = {"candidate": c.name, "master": master, "workers": c.workers, "cores": c.cores}
        for step in STEPS:
            t0 = time.monotonic()
            _stages(env, config, "demo", "--steps", step)
            rec[f"{step}_s"] = round(time.monotonic() - t0, 1)
        rec["total_s"] = round(sum(rec[f"{s}_s"] for s in STEPS), 1)
        sums = _checksums(env, config)
        reference = reference or sums
        rec["same_output"] = sums == reference
        records.append(rec)
        log(
            "scaling",
            f"{c.name}: "
            + ", ".join(f"{s} {rec[f'{s}_s']:.0f} s" for s in STEPS)
            + f", same output {rec['same_output']}",
        )
    if cluster is not None:
        run_command([*cluster[0], "stop"], cluster[1], "stopping the cluster")
    for r in records:
        r["vs_local"] = round(r["total_s"] / records[0]["total_s"], 2)
    meta = {
        **machine(),
        "replay": f"hpm_game1, {seconds:g} s of synthetic play",
        "steps": list(STEPS),
        "checked_tables": list(CHECKED),
        "note": "2 cores in all: more workers add distribution cost, not hardware",
    }
    write_json(out_dir / "scaling.json", meta, records)
    table = markdown_table(
        records,
        [
            ("candidate", "where the stages run", ""),
            ("stream-join_s", "stream join (s)", ".0f"),
            ("aggregates_s", "aggregates + repair (s)", ".0f"),
            ("total_s", "total (s)", ".0f"),
            ("vs_local", "time vs local[2]", ".2f"),
            ("same_output", "same tables", ""),
        ],
    )
    (out_dir / "scaling.md").write_text(
        "# Scaling: local Spark vs a standalone cluster\n\n"
        f"`bash infra/bench.sh scaling{' --quick' if quick else ''}` on {meta['date']}, "
        f"{meta['cpus']} cores. Each candidate runs the main job's `stream-join` and `aggregates` "
        f"steps on its own copy of one lake ({meta['replay']}), as a separate process "
        "(as Airflow starts a stage). Time is wall clock per step, process start included.\n\n"
        f"{table}\n\n"
        '"same tables": the content checksums of '
        + ", ".join(f"`{t}`" for t in CHECKED)
        + " equal local[2]'s.\n\n"
        "The machine has 2 cores whatever the cluster's shape, so this measures what distribution "
        "costs at equal hardware (executors apart from the driver, task scheduling and shuffles over "
        "loopback), not the speed-up more machines would bring.\n"
    )
    log("scaling", f"written {out_dir / 'scaling.json'} and {out_dir / 'scaling.md'}")
    return 0 if all(r["same_output"] for r in records) else 1
