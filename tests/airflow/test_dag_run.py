"""`airflow dags test` of the ingest DAG on SQLite: real spark-submit, real Delta, real GX."""

from __future__ import annotations

import json
import os
import re
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
    # the validation is named after the run, lands in Data Docs, and the run's report page links it
    reports = Path(airflow_env["OOO_LAKE_ROOT"]).parent / "reports"
    assert (reports / "data_docs" / "index.html").is_file()
    pages = list((reports / "quality" / "runs").glob("ingest__manual__*.html"))
    assert len(pages) == 1, pages
    page = pages[0].read_text()
    assert "bronze_accounting" in page and "PASSED" in page and "Quarantine by reason" in page
    assert "../../data_docs/validations/bronze_accounting/ingest__manual__" in page
    assert (reports / "quality" / "index.html").is_file()


def test_unknown_dataset_fails_in_plan_before_spark_starts(airflow_env):
    assert airflow(airflow_env, "db", "migrate").returncode == 0
    run = airflow(airflow_env, "dags", "test", "ingest", "-c", json.dumps({"datasets": "nope"}))
    out = run.stdout + run.stderr
    assert "unknown dataset 'nope'" in out
    assert "state=failed" in out
    # ingest and its check never started (upstream failed); the run's report still ran (all_done)
    assert "starting task_id=ingest " not in out and "starting task_id=validate_bronze " not in out
    assert "starting task_id=quality_report " in out


RESULTS = r"""
import json
from pyspark.sql import functions as F
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from outoforder.io.tables import JOIN_METRICS, JOIN_RESULTS, JOIN_STATE
s = load_settings(); spark = get_spark(s)
res = delta.read(spark, JOIN_RESULTS, s.lake_root)
print("RESULTS" + json.dumps({
    "pairs": res.count(),
    "distinct": res.select("r_seq", "s_seq").distinct().count(),
    "intervals": sorted({r[0] for r in res.select("interval_end_us").distinct().collect()}),
    "states": delta.read(spark, JOIN_STATE, s.lake_root).count(),
    "periods": delta.read(spark, JOIN_METRICS, s.lake_root).count(),
}))
"""


@pytest.fixture(scope="module")
def replayed(airflow_env):
    """A 3 s synthetic replay in the session's lake (its arrival clock: 10,753 s after the epoch)."""
    spark_python = Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python"
    args = ["-m", "outoforder.stages", "replay", "--model", "hpm_game1", "--seconds", "3", "--seed", "1"]
    replay = subprocess.run(
        [str(spark_python), *args], env=airflow_env, capture_output=True, text=True, timeout=600, check=False
    )
    assert replay.returncode == 0, replay.stderr[-3000:]
    return "synthetic/hpm_game1-3s-seed1"


def test_join_stream_dag_joins_one_arrival_interval(airflow_env, replayed):
    spark_python = Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python"
    assert airflow(airflow_env, "db", "migrate").returncode == 0
    # the replay's arrival clock starts at 10,753 s after the epoch (the DEBS 2013 game clock):
    # the one-minute interval ending at 03:00 holds all of it
    conf = {
        "source": "synthetic/hpm_game1-3s-seed1",
        "period_s": 0.5,
        "interval_s": 0.1,
        "on_violation": "warn",
    }
    run = airflow(
        airflow_env, "dags", "test", "join_stream", "1970-01-01T03:00:00+00:00", "-c", json.dumps(conf)
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "state=success" in out
    assert "[join-stream] synthetic/hpm_game1-3s-seed1" in out
    assert "join_results: PASSED" in out
    got = run_probe(str(spark_python), RESULTS, "RESULTS", airflow_env)
    assert got["pairs"] == got["distinct"] > 0
    assert got["intervals"] == [10_800_000_000]  # 03:00 in µs since the epoch
    assert got["states"] == 1
    assert got["periods"] >= 1


AGG = r"""
import json
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from outoforder.io.tables import AGG_REPAIRS, AGG_RESULTS
s = load_settings(); spark = get_spark(s)
res = delta.read(spark, AGG_RESULTS, s.lake_root)
print("AGG" + json.dumps({
    "windows": res.count(),
    "distinct": res.select("window_id").distinct().count(),
    "repaired": res.where("version > 1").count(),
    "repairs": delta.read(spark, AGG_REPAIRS, s.lake_root).count(),
}))
"""


def test_aggregate_stream_triggers_the_repair_asset_and_late_repair_makes_results_exact(
    airflow_env, replayed
):
    spark_python = Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python"
    assert airflow(airflow_env, "db", "migrate").returncode == 0
    conf = {"source": replayed, "gamma_s": 0.5, "on_violation": "warn"}
    run = airflow(
        airflow_env, "dags", "test", "aggregate_stream", "1970-01-01T03:00:00+00:00", "-c", json.dumps(conf)
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert f"[aggregate-stream] {replayed}" in out
    assert "'repair_due': True" in out  # the Γ rule held: ledger_due ran and emitted the asset
    assert "agg_results: PASSED" in out
    repair = airflow(airflow_env, "dags", "test", "late_repair", "-c", json.dumps(conf))
    out = repair.stdout + repair.stderr
    assert repair.returncode == 0, out[-5000:]
    assert "[aggregate-repair]" in out and "windows recomputed" in out
    settled = re.search(r"([\d,]+) without pending late tuples, ([\d,]+) of them exact; 0 missing", out)
    assert settled and settled.group(1) == settled.group(2), out[-3000:]  # exact after the repair
    got = run_probe(str(spark_python), AGG, "AGG", airflow_env)
    assert got["windows"] == got["distinct"] > 0
    assert got["repairs"] == 1 and got["repaired"] > 0


THETA = r"""
import json
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from outoforder.io.tables import THETA_RESULTS, THETA_WINDOWS
s = load_settings(); spark = get_spark(s)
res = delta.read(spark, THETA_RESULTS, s.lake_root)
win = delta.read(spark, THETA_WINDOWS, s.lake_root)
print("THETA" + json.dumps({
    "rows": res.count(),
    "distinct": res.select("window_start_us", "seqs").distinct().count(),
    "windows": win.count(),
    "reported": sum(r[0] for r in win.select("output_rows").collect()),
}))
"""


# The topk_stream and theta_backfill DAGs' interval runs are covered by test_standalone.py,
# which runs them under the real scheduler (and a backfill) and compares them with direct runs.


def test_theta_backfill_dag_runs_an_equi_join_with_the_mcf_prefilter(airflow_env, replayed):
    spark_python = Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python"
    assert airflow(airflow_env, "db", "migrate").returncode == 0
    conf = {"source": replayed, "column": "x", "predicates": "=", "prefilter": "mcf", "partitions": 4}
    run = airflow(
        airflow_env, "dags", "test", "theta_backfill", "1970-01-01T03:00:00+00:00", "-c", json.dumps(conf)
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "kept by the mcf pre-filter" in out
    # the stored rows equal DuckDB's count of the unfiltered join on the sampled windows
    assert "theta_completeness: PASSED" in out and "theta_results: PASSED" in out
    got = run_probe(str(spark_python), THETA, "THETA", airflow_env)
    assert got["rows"] == got["distinct"] == got["reported"] > 0  # every window's rows stored once
