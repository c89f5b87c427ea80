"""`airflow dags test` of the ingest DAG on SQLite: real spark-submit, real Delta, real GX."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow.conftest import run_probe

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

COUNT = r"""
import json, sys
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
s = load_settings(); spark = get_spark(s)
log = delta.read(spark, INGEST_LOG, s.lake_root).where("status = 'done'").collect()
print("COUNTS" + json.dumps({
    "bronze": delta.read(spark, BRONZE, s.lake_root).count(),
    "quarantine": delta.read(spark, QUARANTINE, s.lake_root).count(),
    "log": [[r["source"], r["rows_read"], r["rows_accepted"], r["rows_quarantined"]] for r in log],
}))
"""


def airflow(env, *args, timeout=900):
    exe = Path(sys.executable).parent / "airflow"
    return subprocess.run(
        [str(exe), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_ingest_dag_runs_end_to_end(airflow_env):
    migrate = airflow(airflow_env, "db", "migrate")
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    run = airflow(airflow_env, "dags", "test", "ingest", "-c", json.dumps({"datasets": "ooo/d-1"}))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "state=success" in out
    assert "bronze_accounting: PASSED" in out
    spark_python = Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python"
    counts = run_probe(str(spark_python), COUNT, "COUNTS", airflow_env)
    assert counts == {"bronze": 9600, "quarantine": 0, "log": [["ooo/d-1", 9600, 9600, 0]]}


def test_unknown_dataset_fails_in_plan_before_spark_starts(airflow_env):
    assert airflow(airflow_env, "db", "migrate").returncode == 0
    run = airflow(airflow_env, "dags", "test", "ingest", "-c", json.dumps({"datasets": "nope"}))
    out = run.stdout + run.stderr
    assert "unknown dataset 'nope'" in out
    assert "state=failed" in out
    assert "SparkSubmitHook" not in out  # ingest never started: upstream failed
