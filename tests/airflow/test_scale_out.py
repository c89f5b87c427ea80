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
import subprocess
import time
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


# One of two writer processes (classic Spark sessions, two JVMs) against the MinIO lake. Part 1
# races the log stores themselves: both create commit file i at the same instant, for i in 0..N-1,
# and report the ones they were let through; first the configured store, then Delta's
# S3SingleDriverLogStore (which checks, then writes: it lets both through whenever both check
# before either writes), to show the race is real. Part 2 appends to one Delta table in rounds, both
# at the same instants, each commit tagged; nothing may be lost.
WRITER = r"""
import json, sys, time
from pathlib import Path
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
writer, n, rounds, folder = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
s = load_settings()
spark = get_spark(s)
jvm = spark._jvm
conf = spark._jsparkSession.sessionState().newHadoopConf()  # the session's settings, keys included
def store_of(name):
    cls = jvm
    for part in name.split("."):
        cls = getattr(cls, part)
    return cls(conf)
def create(store, log, i):
    lines = jvm.java.util.ArrayList()
    lines.add(f"w{writer}")
    path = jvm.org.apache.hadoop.fs.Path(f"{s.lake_root}/{log}/_delta_log/{i:020d}.json")
    try:
        store.write(path, lines.iterator(), False, conf)
        return True
    except Exception as e:
        if "FileAlreadyExistsException" in str(e):
            return False
        raise
def barrier(name):
    (folder / f"{name}{writer}").write_text("")
    while not (folder / f"{name}{1 - writer}").exists():
        time.sleep(0.01)
    if writer == 0:
        (folder / f"{name}.tmp").write_text(str(time.time() + 0.5))
        (folder / f"{name}.tmp").rename(folder / f"{name}.t0")
    while not (folder / f"{name}.t0").exists():
        time.sleep(0.01)
    return float((folder / f"{name}.t0").read_text())
won = {}
for log, name in (
    ("race", s.spark_conf(with_jars=False)["spark.delta.logStore.s3a.impl"]),
    ("race-single-driver", "io.delta.storage.S3SingleDriverLogStore"),
):
    store = store_of(name)
    create(store, log, -1 - writer)  # class loading and the first connection, before the race
    t0 = barrier(log)
    won[log] = []
    for i in range(n):
        time.sleep(max(0.0, t0 + 0.1 * i - time.time()))
        if create(store, log, i):
            won[log].append(i)
table = f"{s.lake_root}/two-writers"
def append(tag):
    df = spark.createDataFrame([(writer, tag)], "writer int, tag string")
    df.write.format("delta").mode("append").option("userMetadata", tag).save(table)
if writer == 0:
    append("create")
t0 = barrier("append")
for i in range(rounds):
    time.sleep(max(0.0, t0 + 1.5 * i - time.time()))
    append(f"w{writer}-{i}")
print("WON" + json.dumps(won))
"""

COMMITS = r"""
import json
from outoforder.config import load_settings
from outoforder.io import objectstore
s = load_settings()
mc = objectstore.client(s.storage)
bucket, prefix = objectstore.split_uri(s.lake_root)
def texts(folder):
    for o in mc.list_objects(bucket, prefix=f"{prefix}/{folder}/_delta_log/", recursive=True):
        name = o.object_name.rsplit("/", 1)[-1]
        if name.endswith(".json"):
            yield name, mc.get_object(bucket, o.object_name).read().decode()
race = {int(name[:-5]): text.strip() for name, text in texts("race")}
single = len([name for name, _ in texts("race-single-driver")])
tags = [json.loads(line)["commitInfo"].get("userMetadata")
        for _, text in texts("two-writers") for line in text.splitlines() if "commitInfo" in line]
print("COMMITS" + json.dumps({"race": race, "single": single, "tags": sorted(tags)}))
"""


# The three stream stages over one synthetic stream, in two scheduled-like runs each, wherever the
# environment points (the shared server on the cluster with the s3a lake, or a classic local[1]
# session on a folder): the digests of their outputs, and the master the passes ran on.
STREAMS = r"""
import json
import numpy as np
from outoforder.config import load_settings
from outoforder.io import delta
from outoforder.io.tables import BRONZE
from outoforder.spark.session import get_spark
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.context import StageContext
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import JoinStream
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import TopKStream
s = load_settings()
spark = get_spark(s)
n, t0, step, source = 3_000, 1_700_000_000_000_000, 1_000, "test/cluster-streams"
rng = np.random.default_rng(5)
ts = np.sort(rng.integers(0, 3_000_000, n)) + 10_000_000_000
ts = ts[np.argsort(np.arange(n) + rng.integers(0, 40, n))]  # arrival order: a little disorder
rows = [
    (source, "ball" if rng.random() < 0.4 else "team_a", "k", int(ts[i]), i, t0 + i * step,
     float(rng.uniform(0, 10)), float(rng.uniform(0, 10)), None, float(rng.gamma(2.0, 3.0)), None,
     i, "test", "test", i + 1)
    for i in range(n)
]
bronze = spark.createDataFrame(rows, BRONZE.schema)
delta.append_once(bronze, BRONZE, s.lake_root, "test-cluster", 0, s.storage)
stages = [
    (JoinStream, JoinJob(s_streams=("team_a",), window_us=20_000, theta=3.0, period_us=400_000,
                         interval_us=100_000)),
    (AggregateStream, AggJob(window_us=50_000, slide_us=10_000, coverage_horizon_us=100_000,
                             initial_k_us=20_000)),
    (TopKStream, TopKJob(score="value", k=3, window_us=100_000, slide_us=50_000, initial_cache_us=20_000,
                         n=3, m=3, horizon_us=100_000)),
]
arrivals = []
for stage, job in stages:
    ctx = StageContext.of(spark, s, source, job)
    for i, cut in enumerate((1_234, n)):
        summary = stage(ctx).run(t0 if i == 0 else None, t0 + cut * step)
        arrivals.append(summary.arrivals)
tables = [t for stage, _ in stages for t in stage.outputs]
print("STREAMS" + json.dumps({
    "master": spark.conf.get("spark.master"), "arrivals": arrivals,
    "digests": delta.content_digests(spark, s.lake_root, tables),
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


def test_two_writer_processes_lose_no_commit_on_minio_and_no_secret_is_on_a_command_line(stack, tmp_path):
    """Delta's commits on S3 from two drivers (two JVMs), and where the object store's secret is not."""
    spark_python = str(Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python")
    env = {k: v for k, v in stack.items() if k != "client"}
    env |= {"OOO_SPARK_REMOTE": "", "OOO_SPARK_MASTER": "local[1]", "OOO_LAKE_ROOT": "s3a://lake/two-writers"}
    secret = env["OOO_S3_SECRET_KEY"]
    n, rounds = 100, 6
    logs = [tmp_path / f"writer-{w}.log" for w in (0, 1)]
    writers = []
    for w, log in enumerate(logs):
        with log.open("w") as out:  # a file, not a pipe: a full pipe would stall the writer
            writers.append(
                subprocess.Popen(
                    [spark_python, "-c", WRITER, str(w), str(n), str(rounds), str(tmp_path)],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    # while both JVMs run: no process's command line carries the secret (/proc/<pid>/cmdline is
    # readable by every local user)
    exposed: set[str] = set()
    while any(w.poll() is None for w in writers):
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if secret in argv:
                exposed.add(argv[:200])
        time.sleep(0.5)
    outs = [log.read_text() for log in logs]
    assert [w.returncode for w in writers] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert not exposed
    won = [json.loads(next(ln for ln in o.splitlines() if ln.startswith("WON"))[3:]) for o in outs]

    got = run_probe(spark_python, COMMITS, "COMMITS", env)
    # every commit file was created by exactly one writer, and holds that writer's content
    assert sorted(won[0]["race"] + won[1]["race"]) == list(range(n)), "a commit file was let through twice"
    race = {int(k): v for k, v in got["race"].items()}
    assert all(race[i] == f"w{w}" for w in (0, 1) for i in won[w]["race"])
    # the same race with Delta's single-driver store lets some file through to both: the race is real
    twice = set(won[0]["race-single-driver"]) & set(won[1]["race-single-driver"])
    assert twice, "the writers never raced: the check above proves nothing"
    # each file exists once (plus the two warm-ups): the second write replaced the first
    assert got["single"] == n + 2
    # and Delta's appends from both processes at the same instants: every commit is in the log
    assert got["tags"] == sorted(["create", *(f"w{w}-{i}" for w in (0, 1) for i in range(rounds))])


def test_the_secret_is_in_no_serialized_dag_or_rendered_field(stack):
    """After the DAG run: what Airflow stores about DAGs and their tasks does not carry the S3 secret."""
    import psycopg2

    secret = stack["OOO_S3_SECRET_KEY"]
    db = stack["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace("postgresql+psycopg2", "postgresql")
    with psycopg2.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT dag_id, data::text FROM serialized_dag")
        dags = cur.fetchall()
        cur.execute("SELECT rendered_fields::text FROM rendered_task_instance_fields")
        rendered = [r[0] for r in cur.fetchall()]
    assert "ingest_landing" in {d for d, _ in dags}  # what the check reads is there
    assert rendered
    assert not [d for d, text in dags if text and secret in text]
    assert not [r for r in rendered if secret in r]


def test_the_stream_stages_pass_on_the_cluster_as_they_do_locally(stack, tmp_path):
    """A stream stage's pass runs on the standalone cluster through the shared server, over s3a, and
    writes what the same passes write in a local session; a job's pass is one task, so jobs (and
    sources) are what run side by side (docs/architecture.md, "Scaling out")."""
    spark_python = str(Path(os.environ["OOO_SPARK_VENV"]) / "bin" / "python")
    env = {k: v for k, v in stack.items() if k != "client"}
    on_cluster = run_probe(
        spark_python, STREAMS, "STREAMS", {**env, **stack["client"], "OOO_LAKE_ROOT": "s3a://lake/streams"}
    )
    local = {**env, "OOO_SPARK_REMOTE": "", "OOO_SPARK_MASTER": "local[1]"}
    local["OOO_LAKE_ROOT"] = str(tmp_path / "lake")
    here = run_probe(spark_python, STREAMS, "STREAMS", local)
    assert on_cluster["master"] == stack["OOO_SPARK_MASTER"] != here["master"]
    assert on_cluster["arrivals"] == here["arrivals"] == [1_234, 1_766] * 3
    assert all(d["rows"] > 0 for d in here["digests"].values()), here["digests"]
    assert on_cluster["digests"] == here["digests"]
