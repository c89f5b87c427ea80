"""The main job (demo stage) end to end: in-process on the session's Spark, its idempotence, and the
same job on the scaled-out stack (a Spark standalone cluster, the lake on MinIO) giving the same tables.
"""

import ast
import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from outoforder.io import delta
from outoforder.stages.cli import DEMO_STEPS, main
from tests import services

pytestmark = [pytest.mark.spark, pytest.mark.delta, pytest.mark.integration]

DEMO = '[demo]\nsynthetic_seconds = 2.0\npreset = "qjoin_d1"\n[ingest]\nbatch_rows = 50000\n'


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, spark):
    """The main job once on the embedded default (local Spark, a local lake): its config and output."""
    folder = tmp_path_factory.mktemp("main-job")
    config = folder / "demo.toml"
    config.write_text(f'[lake]\nroot = "{folder / "lake"}"\n' + DEMO)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["--config", str(config), "demo"])
    assert rc == 0, buf.getvalue()[-5000:]
    return {"config": config, "out": buf.getvalue(), "lake": folder / "lake"}


def _digests(spark, lake):
    return delta.content_digests(spark, lake)


def test_main_job_ingests_everything_reports_disorder_and_passes_quality(local_run, spark, capsys):
    config, out = local_run["config"], local_run["out"]
    assert "ooo/d-1" in out
    assert "1,544" in out and "16.08%" in out and "4.544" in out  # README figures
    assert "9,850" in out and "98.46%" in out  # DEBS 2015
    assert "[inject]   target  : late 83.41%" in out
    assert "bronze_accounting: PASSED" in out
    assert "[demo] 6/9" in out and "[join-stream] synthetic/qjoin_d1-2s-seed7" in out
    assert "join_results: PASSED" in out  # no duplicate pairs
    assert "[demo] 7/9" in out and "[aggregate-stream] synthetic/qjoin_d1-2s-seed7" in out
    assert "[aggregate-repair]" in out and "agg_results: PASSED" in out
    assert "[demo] 8/9" in out and "theta_completeness: PASSED" in out and "theta_results: PASSED" in out
    assert "[demo] 9/9" in out and "[topk-stream] synthetic/qjoin_d1-2s-seed7" in out
    assert "no top-k window emitted yet" in out  # 4 s windows + K 2 s: a 2 s replay closes none
    before = _digests(spark, local_run["lake"])
    assert main(["--config", str(config), "demo"]) == 0
    again = capsys.readouterr().out
    assert "is up to date" in again and "join_results: PASSED" in again
    assert "up to date; checking it" in again and "agg_results: PASSED" in again
    assert "theta_completeness: PASSED" in again  # the backfill replaced its slice: same rows
    assert again.count("already ingested") == 10  # 9 real files + the replay
    assert "0 accepted" not in again
    # ... and leaves every table as it was, but the validation log (one row per suite per run name)
    after = _digests(spark, local_run["lake"])
    assert {k: v for k, v in after.items() if k != "gold/quality_runs"} == {
        k: v for k, v in before.items() if k != "gold/quality_runs"
    }


@pytest.mark.timeout(2700)
def test_the_main_job_on_a_cluster_over_minio_gives_the_same_tables(local_run, spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale-out")
    config = folder / "demo.toml"
    config.write_text(DEMO)
    python = os.environ.get("PYSPARK_PYTHON", "python")
    with services.minio(folder) as s3, services.spark_cluster(folder) as cluster:
        env = {
            **os.environ,
            **s3,
            **cluster,
            "OOO_LAKE_ROOT": "s3a://lake/main-job",
            "OOO_WORK_DIR": str(folder / "work"),
            "OOO_REPORTS_DIR": str(folder / "work" / "reports"),
        }

        def stage(*args):
            done = subprocess.run(
                [python, "-m", "outoforder.stages", "--config", str(config), *args],
                env=env, capture_output=True, text=True, timeout=2400, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
            return done.stdout

        out = stage("demo")
        assert f"session up ({cluster['OOO_SPARK_MASTER']})" in out
        assert "lake at s3a://lake/main-job" in out
        line = next(ln for ln in stage("checksum", "--json").splitlines() if ln.startswith("CHECKSUMS"))
    remote = json.loads(line[len("CHECKSUMS") :])
    local = _digests(spark, local_run["lake"])
    assert remote["bronze/arrivals"]["rows"] > 100_000 and remote["gold/join_results"]["rows"] > 0
    # the local lake's validation log also holds the idempotence test's second run
    differ = [t for t in local if t != "gold/quality_runs" and local[t] != remote[t]]
    assert not differ, {t: (local[t], remote[t]) for t in differ}


def test_cli_errors_are_one_line_and_exit_2(capsys):
    assert main(["ingest", "--datasets", "nope"]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err
    assert main(["ingest", "--file", "x.csv"]) == 2
    assert "needs --reader and --source" in capsys.readouterr().err
    assert main(["replay", "--model", "gamma:k=1"]) == 2
    assert "unknown delay model" in capsys.readouterr().err


def test_the_pipeline_dag_runs_every_demo_step_in_order():
    # dags/pipeline.py must not import the CLI at parse time, so it spells the steps out
    tree = ast.parse((Path(__file__).parents[2] / "dags" / "pipeline.py").read_text())
    steps = next(
        node.value for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "STEPS"
    )  # fmt: skip
    assert tuple(ast.literal_eval(steps)) == DEMO_STEPS


def test_demo_refuses_unknown_steps(capsys):
    assert main(["demo", "--steps", "ingest,nope"]) == 2
    assert "unknown demo step nope" in capsys.readouterr().err
