"""The main job (demo stage) end to end, in-process on the session's Spark, and its idempotence."""

import ast
from pathlib import Path

import pytest

from outoforder.stages.cli import DEMO_STEPS, main

pytestmark = [pytest.mark.spark, pytest.mark.delta, pytest.mark.integration]


@pytest.fixture
def config(tmp_path, spark):
    f = tmp_path / "demo.toml"
    f.write_text(
        f'[lake]\nroot = "{tmp_path / "lake"}"\n[demo]\nsynthetic_seconds = 2.0\npreset = "qjoin_d1"\n'
        "[ingest]\nbatch_rows = 50000\n"
    )
    return f


def test_main_job_ingests_everything_reports_disorder_and_passes_quality(config, capsys):
    assert main(["--config", str(config), "demo"]) == 0
    out = capsys.readouterr().out
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
    assert main(["--config", str(config), "demo"]) == 0
    again = capsys.readouterr().out
    assert "is up to date" in again and "join_results: PASSED" in again
    assert "up to date; checking it" in again and "agg_results: PASSED" in again
    assert "theta_completeness: PASSED" in again  # the backfill replaced its slice: same rows
    assert again.count("already ingested") == 10  # 9 real files + the replay
    assert "0 accepted" not in again


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
