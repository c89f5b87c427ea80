"""The ingest_landing DAG on the scaled-out stack: PostgreSQL metadata, MinIO lake and landing, Spark cluster.

Every service is the project's own, started by its infra script (tests/services.py): the shared
Spark Connect server runs on the standalone cluster with the s3a lake (one driver commits every
table), and every task is its client. Files dropped into the landing bucket are ingested once (a
second copy of the same content is recognised), moved under ingested/ or rejected/ with a reason,
bronze lands on s3a, the reports are published to a bucket, and the run is recorded in PostgreSQL.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests import services
from tests.airflow.conftest import airflow_cli, run_probe

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.timeout(1800)]

DROP = r"""
import json, sys
from pathlib import Path
from outoforder.config import load_settings
from outoforder.io import objectstore
s = load_settings().storage
src = Path(sys.argv[1])
for key in ("ooo/ooo/d-1.csv.gz", "ooo/ooo/d-2-is-d-1.csv.gz", "nope/x/y.csv", "stray.csv"):
    objectstore.put_file(s, f"{s.landing_uri}/incoming/{key}", src)
# a file that does not fit its declared source: rejected with its reason, the others still ingested
objectstore.put_file(s, f"{s.landing_uri}/incoming/plant/p/misfit.csv", Path(sys.argv[2]))
print("DROPPED" + json.dumps([f.relative for f in objectstore.pending(s)]))
"""

AFTER = r"""
import json
from minio import Minio
from outoforder.config import load_settings
from outoforder.io import delta, objectstore
from outoforder.io.tables import BRONZE, INGEST_LOG
from outoforder.spark.session import get_spark
s = load_settings()
mc = objectstore.client(s.storage)
bucket, prefix = objectstore.split_uri(s.storage.landing_uri)
def listing(bucket, prefix):
    return sorted(o.object_name for o in mc.list_objects(bucket, prefix=prefix + "/", recursive=True))
keys = [k[len(prefix) + 1:] for k in listing(bucket, prefix)]
reasons = {
    k: mc.get_object(bucket, f"{prefix}/{k}").read().decode() for k in keys if k.endswith(".reason.txt")
}
published = listing(*objectstore.split_uri(s.storage.publish_uri))
from minio.error import S3Error
try:  # the pipeline's user may use its buckets, not administer the store
    mc.make_bucket("not-the-pipelines")
    denied = ""
except S3Error as e:
    denied = e.code
spark = get_spark(s)
log = delta.read(spark, INGEST_LOG, s.lake_root).where("status = 'done'").collect()
print("AFTER" + json.dumps({
    "keys": keys, "reasons": reasons, "published": published, "denied": denied,
    "bronze": delta.read(spark, BRONZE, s.lake_root).count(),
    "log": sorted([r["source"], r["source_file"], r["rows_accepted"]] for r in log),
}))
"""


def _declared(folder: Path) -> Path:
    path = folder / "declared.toml"
    path.write_text(
        '[sources.plant]\nformat = "csv"\nstream = "press"\nkey = "sensor"\n'
        'event_time = { column = "ts", unit = "ms" }\nvalues = { value = "temp" }\n'
    )
    return path


@pytest.fixture(scope="module")
def stack(airflow_env, tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale-out")
    connect = services.connect_env(folder)
    with (
        services.minio(folder) as s3,
        services.spark_cluster(folder) as cluster,
        services.postgres(folder) as pg,
    ):
        env = {
            **airflow_env,
            **s3,
            **pg,
            **connect,
            "AIRFLOW_HOME": str(folder / "airflow"),
            "AIRFLOW_CONN_OUTOFORDER_SPARK": json.dumps(
                {
                    "conn_type": "spark_connect",
                    "host": "localhost",
                    "port": int(connect["OOO_SPARK_CONNECT_PORT"]),
                    "extra": {"token_file": str(Path(connect["OOO_SPARK_CONNECT_DIR"]) / "token")},
                }
            ),
            "OOO_SPARK_MASTER": cluster["OOO_SPARK_MASTER"],
            "OOO_LAKE_ROOT": "s3a://lake/airflow-test",
            "OOO_LANDING_URI": "s3a://landing/airflow-test",
            "OOO_PUBLISH_URI": "s3a://reports/airflow-test",
            "OOO_WORK_DIR": str(folder / "work"),
            "OOO_CONFIG": str(_declared(folder)),
            "OOO_REPORTS_DIR": str(folder / "work" / "reports"),
        }
        # the shared server, on the cluster, with the s3a lake's storage
        with services.spark_connect(env) as client:
            yield {**env, "client": client}


def test_landing_files_are_ingested_once_on_the_cluster_into_an_s3a_lake_with_postgres_metadata(
    stack, data_dir
):
    spark_python = str(Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python")
    env = {k: v for k, v in stack.items() if k != "client"}
    misfit = Path(stack["OOO_WORK_DIR"]).parent / "misfit.csv"
    misfit.write_text("line,sensor,temp\npress,s1,20.5\n")
    dropped = run_probe(
        spark_python, DROP, "DROPPED", env, str(data_dir / "ooo-dataset" / "d-1.csv.gz"), str(misfit)
    )
    assert len(dropped) == 5
    migrate = airflow_cli(env, "db", "migrate")
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    run = airflow_cli(env, "dags", "test", "ingest_landing")
    out = run.stdout + run.stderr
    (Path(stack["OOO_WORK_DIR"]).parent / "dags-test.log").write_text(out)  # kept for a failure's reader
    assert run.returncode == 0, out[-6000:]
    assert "state=success" in out
    assert "5 files waiting" in out
    assert "bronze_accounting: PASSED" in out
    assert "already ingested" in out  # the copy with the same content
    assert "[publish]" in out
    assert f"{stack['OOO_SPARK_MASTER']}) in" in out  # the stages ran on the server, on the cluster

    got = run_probe(spark_python, AFTER, "AFTER", {**env, **stack["client"]})  # reads s3a, a client too
    assert got["bronze"] == 9600  # once, although the file landed twice
    assert got["log"] == [["ooo", "s3a://landing/airflow-test/incoming/ooo/ooo/d-1.csv.gz", 9600]]
    assert not [k for k in got["keys"] if k.startswith("incoming/")]  # nothing left waiting
    assert "ingested/ooo/ooo/d-1.csv.gz" in got["keys"]
    assert "ingested/ooo/ooo/d-2-is-d-1.csv.gz" in got["keys"]
    assert set(got["reasons"]) == {
        "rejected/nope/x/y.csv.reason.txt",
        "rejected/stray.csv.reason.txt",
        "rejected/plant/p/misfit.csv.reason.txt",
    }
    assert "no column 'ts'" in got["reasons"]["rejected/plant/p/misfit.csv.reason.txt"]
    assert "unknown reader 'nope'" in got["reasons"]["rejected/nope/x/y.csv.reason.txt"]
    assert "<reader>/<source id>/<file name>" in got["reasons"]["rejected/stray.csv.reason.txt"]
    assert "airflow-test/quality/index.html" in got["published"]
    assert got["denied"] == "AccessDenied"  # least privilege: the DAG above ran with these keys

    # the keys were generated at MinIO's first start and are kept owner-only; the pipeline's are not root's
    creds = Path(stack["OOO_WORK_DIR"]).parent / "minio" / ".credentials"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in creds.read_text().splitlines())
    assert values["PIPELINE_SECRET_KEY"] == stack["OOO_S3_SECRET_KEY"] != values["MINIO_ROOT_PASSWORD"]
    assert len(values["MINIO_ROOT_PASSWORD"]) >= 32
    assert any(p.startswith("airflow-test/data_docs/") for p in got["published"])

    # the run is recorded in PostgreSQL, not SQLite
    db = stack["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert db.startswith("postgresql")
    import psycopg2

    with psycopg2.connect(db.replace("postgresql+psycopg2", "postgresql")) as conn, conn.cursor() as cur:
        cur.execute("SELECT state FROM dag_run WHERE dag_id = 'ingest_landing'")
        assert [r[0] for r in cur.fetchall()] == ["success"]
    assert not (Path(stack["AIRFLOW_HOME"]) / "airflow.db").exists()
