"""Airflow tests run in the Airflow venv with an isolated AIRFLOW_HOME (SQLite) per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import services, sparkconf

REPO = Path(__file__).resolve().parents[2]
# The plugin's modules importable here as in Airflow's processes, whatever this run imported before:
# Airflow puts its plugins folder on sys.path only once it loads plugins
if str(REPO / "plugins") not in sys.path:
    sys.path.append(str(REPO / "plugins"))

# A hang guard for one `airflow dags test` (each of its Spark tasks is a spark-submit), not a
# performance bound: under infra/test.sh's five parallel runs on 2 cores a DAG run takes 3-5x its
# time alone (the aggregate DAG and the repair's: over 900 s in CI on a slow machine, 256 s and
# 307 CPU-seconds alone).
AIRFLOW_CLI_TIMEOUT_S = 1800


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    spark_venv = os.environ.get("OOO_SPARK_VENV")
    if not spark_venv or not Path(spark_venv, "bin", "spark-submit").exists():
        pytest.fail("OOO_SPARK_VENV is not set up: run the tests through infra/test.sh")
    home = tmp_path_factory.mktemp("airflow-home")
    connect = services.connect_env(home)
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            # the stage tasks' Spark: the session's Spark Connect server (fixture spark_server)
            **connect,
            "AIRFLOW_CONN_OUTOFORDER_SPARK": json.dumps(
                {
                    "conn_type": "spark_connect",
                    "host": "localhost",
                    "port": int(connect["OOO_SPARK_CONNECT_PORT"]),
                    "extra": {
                        "token_file": str(Path(connect["OOO_SPARK_CONNECT_DIR"]) / "token"),
                        "runner": str(Path(connect["OOO_SPARK_CONNECT_DIR"]) / "runner.sock"),
                    },
                }
            ),
            "OOO_LAKE_ROOT": str(home / "lake"),
            "PATH": f"{spark_venv}/bin:{Path(sys.executable).parent}:{env.get('PATH', '')}",
            "PYSPARK_PYTHON": f"{spark_venv}/bin/python",
            **sparkconf.stage_env(home),
        }
    )
    return env


@pytest.fixture(scope="session")
def spark_server(airflow_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The session's Spark Connect server, which every DAG test's stage tasks are clients of.

    Yields :func:`airflow_env` with the client settings (for stages the tests run themselves).
    """
    with services.spark_connect(airflow_env) as client:
        yield {**airflow_env, **client}


def run_probe(python: str, code: str, tag: str, env: dict[str, str], *args: str) -> dict:
    """Run ``code`` in a fresh interpreter; return the JSON it printed after ``tag``."""
    run = subprocess.run(
        [python, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith(tag)), None)
    assert line, f"probe {tag} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(line[len(tag) :])


def airflow_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run the ``airflow`` command of this venv with ``args``; the caller checks its return code."""
    exe = Path(sys.executable).parent / "airflow"
    return subprocess.run(
        [str(exe), *args], env=env, capture_output=True, text=True, timeout=AIRFLOW_CLI_TIMEOUT_S, check=False
    )
