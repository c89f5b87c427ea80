"""`airflow dags test` on SQLite: stage tasks as clients of a real Spark Connect server, real Delta, real GX.

The ingest DAG (its plan task hands the datasets to the stage through XCom), and the aggregate
DAG whose Γ-rule task emits the asset that schedules ``late_repair``. That every run ends with its
report, also after a failed task, is the report tasks' trigger rule (test_dag_integrity.py). The
other DAGs' stages run the same way: topk_stream and theta_backfill under the real scheduler in
test_standalone.py, ingest_landing on the scaled-out stack in test_scale_out.py; every DAG's Params
map to its stages' options (test_dag_params.py), and the stages themselves are tested in the Spark
venv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.airflow.conftest import airflow_cli, run_probe

# two DAG runs in a test (AIRFLOW_CLI_TIMEOUT_S each, a hang guard) after a replay
pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def migrated(spark_server):
    """The session's metadata database, migrated once for the DAG runs of this module."""
    migrate = airflow_cli(spark_server, "db", "migrate")
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    return spark_server


def test_ingest_dag_runs_end_to_end(migrated):
    airflow_env = migrated
    run = airflow_cli(airflow_env, "dags", "test", "ingest", "-c", json.dumps({"datasets": "ooo/d-1"}))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "state=success" in out
    # the stage's count, and the check that bronze, quarantine and the ingest log hold exactly it
    assert "[ingest] 1 files: 9,600 rows read = 9,600 accepted + 0 quarantined" in out
    assert "bronze_accounting: PASSED" in out
    # the validation is named after the run, lands in Data Docs, and the run's report page links it
    reports = Path(airflow_env["OOO_LAKE_ROOT"]).parent / "reports"
    assert (reports / "data_docs" / "index.html").is_file()
    pages = list((reports / "quality" / "runs").glob("ingest__manual__*.html"))
    assert len(pages) == 1, pages
    page = pages[0].read_text()
    assert "bronze_accounting" in page and "PASSED" in page and "Quarantine by reason" in page
    assert "../../data_docs/validations/bronze_accounting/ingest__manual__" in page
    assert (reports / "quality" / "index.html").is_file()


def test_a_spark_connection_submits_each_stage_as_an_application_of_its_own(migrated, tmp_path):
    # the same DAG on a `spark` connection: spark-submit, one application per task, no DAG edited
    # (on a lake of its own with no tables: the path is under test here, not compaction)
    env = {
        **migrated,
        "AIRFLOW_CONN_OUTOFORDER_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "OOO_LAKE_ROOT": str(tmp_path / "lake"),
    }
    run = airflow_cli(env, "dags", "test", "maintenance")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "Spark-Submit cmd" in out  # the provider's hook, not a client of the server
    assert "session up (in-process, local[2])" in out  # its own application, on the connection's master
    assert "[maintain]" in out


@pytest.mark.parametrize("dag_id", ["join_stream", "aggregate_stream", "topk_stream", "theta_backfill"])
def test_a_dag_run_on_an_empty_lake_is_skipped_not_failed(migrated, tmp_path, dag_id):
    # a DAG unpaused before its stream started (here: the current minute, on a lake with nothing):
    # the stage says what bronze has and the run succeeds with its stage and check skipped
    from datetime import UTC, datetime

    env = {**migrated, "OOO_LAKE_ROOT": str(tmp_path / "lake")}
    now = datetime.now(UTC).replace(second=0, microsecond=0).isoformat()
    run = airflow_cli(env, "dags", "test", dag_id, now)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert "state=success" in out and "state=failed" not in out, out[-5000:]
    assert "nothing to do yet" in out and "bronze has no rows of source" in out, out[-5000:]


@pytest.fixture(scope="module")
def replayed(spark_server):
    """A 3 s synthetic replay in the session's lake (its arrival clock: 10,753 s after the epoch)."""
    spark_python = Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python"
    args = ["-m", "outoforder.stages", "replay", "--model", "hpm_game1", "--seconds", "3", "--seed", "1"]
    replay = subprocess.run(
        [str(spark_python), *args], env=spark_server, capture_output=True, text=True, timeout=600, check=False
    )
    assert replay.returncode == 0, replay.stderr[-3000:]
    return "synthetic/hpm_game1-3s-seed1"


def test_aggregate_stream_triggers_the_repair_asset_and_late_repair_makes_results_exact(migrated, replayed):
    airflow_env = migrated
    conf = {"source": replayed, "gamma_s": 0.5, "on_violation": "warn"}
    run = airflow_cli(
        airflow_env, "dags", "test", "aggregate_stream", "1970-01-01T03:00:00+00:00", "-c", json.dumps(conf)
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-5000:]
    assert f"[aggregate-stream] {replayed}" in out
    assert "'repair_due': True" in out  # the Γ rule held: ledger_due ran and emitted the asset
    assert "agg_results: PASSED" in out
    repair = airflow_cli(airflow_env, "dags", "test", "late_repair", "-c", json.dumps(conf))
    out = repair.stdout + repair.stderr
    assert repair.returncode == 0, out[-5000:]
    repaired = re.findall(r"\[aggregate-repair\] .*windows recomputed, ([\d,]+) changed", out)
    assert len(repaired) == 1 and int(repaired[0].replace(",", "")) > 0, out[-3000:]
    settled = re.search(r"([\d,]+) without pending late tuples, ([\d,]+) of them exact; 0 missing", out)
    assert settled and settled.group(1) == settled.group(2), out[-3000:]  # exact after the repair
    assert "agg_results: PASSED" in out  # every window stored once


PRODUCE = r"""
import json, random, sys, time
from outoforder.io import kafka
boot, topic = sys.argv[1], sys.argv[2]
kafka.create_topic(boot, topic, 3)
rng = random.Random(3)
now_ms = int(time.time() * 1000)
records = []
for i in range(400):
    body = {"kind": "forklift" if i % 2 else "picker", "tag": f"t{i % 5}", "x": rng.uniform(0, 5),
            "y": rng.uniform(0, 5), "t_ms": now_ms - 5_000 + i * 10 - rng.choice([0, 0, 200, 1500])}
    records.append((body["tag"].encode(), json.dumps(body).encode()))
print("SENT" + json.dumps({"records": kafka.produce(boot, topic, records)}))
"""


def test_the_kafka_dag_ingests_a_topic_that_the_join_dag_then_joins(migrated, tmp_path):
    from datetime import UTC, datetime, timedelta

    from tests import services

    spark_python = str(Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python")
    with services.kafka(tmp_path) as kafka:
        env = {**migrated, **kafka, "OOO_LAKE_ROOT": str(tmp_path / "lake")}  # a lake of its own
        config = tmp_path / "yard.toml"
        config.write_text(
            '[sources.yard]\ntopic = "yard"\nformat = "jsonl"\nkey = "tag"\n'
            'event_time = { column = "t_ms", unit = "ms" }\n'
            'stream = { column = "kind", values = ["forklift", "picker"] }\nvalues = { x = "x", y = "y" }\n'
        )
        sent = run_probe(spark_python, PRODUCE, "SENT", env, kafka["OOO_KAFKA_BOOTSTRAP"], "yard")
        assert sent == {"records": 400}
        # the join's run covers the minute before this time: every record arrived before it, and the
        # ingest below lists the topic after it, so the interval is covered
        joined_at = (datetime.now(UTC) + timedelta(seconds=1)).replace(microsecond=0).isoformat()
        conf = {"source": "yard", "config": str(config)}
        run = airflow_cli(env, "dags", "test", "ingest_kafka", "-c", json.dumps(conf))
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-5000:]
        assert "400 records = 400 accepted + 0 quarantined" in out
        assert "bronze_accounting: PASSED" in out
        join = {**conf, "r_streams": "forklift", "s_streams": "picker", "theta": 3.0, "on_violation": "warn"}
        run = airflow_cli(env, "dags", "test", "join_stream", joined_at, "-c", json.dumps(join))
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-5000:]
        pairs = re.search(r"\[join-stream\] yard .*?: ([\d,]+) arrivals, ([\d,]+) new pairs", out)
        assert pairs and pairs.group(1) == "400", out[-3000:]  # every ingested record, once
        assert int(pairs.group(2).replace(",", "")) > 0, out[-3000:]
