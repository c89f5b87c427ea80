"""Every DAG Param maps to a CLI flag of the stage it feeds, and every job option of that stage to a Param.

The DAGs are parsed once (a fresh interpreter, as Airflow does); each StageOperator's templated
arguments are rendered with the DAG's Param defaults and parsed by the real CLI parser, and the
job the stage would run equals the job the DAG's Params describe. Runs in seconds: no Spark.
"""

from __future__ import annotations

import sys

import pytest

from outoforder.stages import registry, spec
from outoforder.stages.cli import build_parser
from tests.airflow.conftest import REPO, run_probe

pytestmark = pytest.mark.airflow

PROBE = r"""
import json, sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
import jinja2
from airflow.dag_processing.dagbag import DagBag
from outoforder_airflow.operators import StageOperator

bag = DagBag(dag_folder=sys.argv[1])
end = datetime(1970, 1, 1, 3, tzinfo=timezone.utc)
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag in bag.dags.values():
    defaults = {k: dag.params[k] for k in dag.params}
    context = {
        "params": defaults, "data_interval_start": end - timedelta(minutes=1), "data_interval_end": end,
        "logical_date": end, "macros": SimpleNamespace(timedelta=timedelta), "run_id": "manual__t",
        "dag": SimpleNamespace(dag_id=dag.dag_id), "ti": SimpleNamespace(xcom_pull=lambda **kw: "ooo/d-1"),
        "dag_run": SimpleNamespace(start_date=end, run_type="scheduled"),
    }
    tasks, templated = {}, []
    for t in dag.tasks:
        templated += [str(getattr(t, f, "")) for f in t.template_fields]
        if isinstance(t, StageOperator):
            raw = list(t.stage_args)
            rendered = [jinja2.Template(a).render(**context) for a in raw]
            # a backfill's run renders a stream stage's --catch-up as --no-catch-up
            backfill = {**context, "dag_run": SimpleNamespace(start_date=end, run_type="backfill")}
            in_backfill = [jinja2.Template(a).render(**backfill) for a in raw]
            tasks[t.task_id] = {"stage": t.stage, "raw": raw, "args": rendered, "backfill": in_backfill}
    out["dags"][dag.dag_id] = {"params": defaults, "tasks": tasks, "templated": templated}
print("PARAMS" + json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def dags(airflow_env):
    got = run_probe(sys.executable, PROBE, "PARAMS", airflow_env, str(REPO / "dags"))
    assert got["errors"] == {}
    return got["dags"]


def _stage_tasks(dags):
    return [(d, t, spec_) for d, dag in dags.items() for t, spec_ in dag["tasks"].items()]


def test_every_stage_task_parses_with_the_dags_defaults_and_runs_the_dags_job(dags):
    parser = build_parser()
    checked = 0
    for dag_id, task_id, task in _stage_tasks(dags):
        try:
            args = parser.parse_args(task["args"])
            in_backfill = parser.parse_args(task["backfill"])
        except SystemExit:  # argparse reports on stderr; name the task here
            pytest.fail(f"{dag_id}.{task_id}: the CLI rejects {task['args']} or {task['backfill']}")
        # a stream stage catches up in scheduled runs, and processes exactly its interval in a backfill's
        assert not getattr(in_backfill, "catch_up", False), f"{dag_id}.{task_id}"
        if "--catch-up" in task["args"]:
            assert args.catch_up and task["stage"].endswith("-stream"), f"{dag_id}.{task_id}"
        job = registry.stage(task["stage"]).job
        if job is None:
            continue
        params = dags[dag_id]["params"]
        assert job.from_options(vars(args)) == job.from_options(params), f"{dag_id}.{task_id}"
        checked += 1
    assert checked >= 10  # the join, aggregate, θ and top-k DAGs' stage tasks


def test_every_param_reference_is_a_param_and_every_job_option_is_passed(dags):
    for dag_id, task_id, task in _stage_tasks(dags):
        params = dags[dag_id]["params"]
        raw = " ".join(task["raw"])
        referenced = {p for p in params if f"params.{p} " in raw or f"params.{p}}}" in raw}
        unknown = [a for a in task["raw"] if "params." in a and not any(f"params.{p}" in a for p in params)]
        assert not unknown, f"{dag_id}.{task_id} refers to Params it does not declare: {unknown}"
        job = registry.stage(task["stage"]).job
        if job is None:
            continue
        options = {o.name for o in job.options()} - ({"estimator"} if task["stage"] == "join" else set())
        missing = options - referenced
        assert not missing, f"{dag_id}.{task_id} does not pass the job options {sorted(missing)}"
        for o in options:  # the flag in front of each Param is the option's own
            i = next(i for i, a in enumerate(task["raw"]) if f"params.{o} " in a or f"params.{o}}}" in a)
            assert task["raw"][i - 1] == job.option(o).flag, f"{dag_id}.{task_id}: {o}"


def test_every_param_of_a_dag_is_read_by_one_of_its_tasks(dags):
    # the verdict and the config file go to every stage through the operator; a Param nobody reads
    # would silently do nothing when a user sets it
    for dag_id, dag in dags.items():
        used = {spec.ON_VIOLATION.name, spec.CONFIG.name}
        used |= {p for p in dag["params"] if any(f"params.{p}" in a for a in dag["templated"])}
        assert set(dag["params"]) <= used, f"{dag_id}: Params no task reads: {set(dag['params']) - used}"


def test_the_configs_dags_table_sets_the_defaults_of_scheduled_runs(airflow_env, tmp_path):
    # what live mode does (infra/live.sh): every DAG's source, and one job's own values
    cfg = tmp_path / "dags.toml"
    cfg.write_text('[dags]\nsource = "yard"\n[dags.join]\nq_user = 0.9\nwindow_s = 0.25\n')
    env = {**airflow_env, "OOO_CONFIG": str(cfg)}
    dags = run_probe(sys.executable, PROBE, "PARAMS", env, str(REPO / "dags"))["dags"]
    for dag_id in ("join_stream", "aggregate_stream", "topk_stream", "ingest_kafka"):
        assert dags[dag_id]["params"]["source"] == "yard", dag_id
    assert (dags["join_stream"]["params"]["q_user"], dags["join_stream"]["params"]["window_s"]) == (0.9, 0.25)
    # a key that is not one of the job's Params fails the DAGs' import, naming it
    cfg.write_text("[dags.join]\nq_usr = 0.9\n")
    bad = run_probe(sys.executable, PROBE, "PARAMS", env, str(REPO / "dags"))
    assert {k.rsplit("/", 1)[-1] for k in bad["errors"]} == {"join_stream.py"}
    assert all("q_usr" in e for e in bad["errors"].values())


def test_an_operator_installed_beside_the_built_in_ones_gets_a_stream_dag(airflow_env, tmp_path, monkeypatch):
    # the toy of tests/toy_operator on the path only (an entry point): dags/operators.py builds its DAG
    toy = str(REPO / "tests" / "toy_operator")
    cfg = tmp_path / "toy.toml"
    cfg.write_text("[dags.toy]\nslack_s = 0.25\n")  # its own [dags.<name>] table sets a default
    env = {**airflow_env, "PYTHONPATH": f"{toy}:{airflow_env.get('PYTHONPATH', '')}", "OOO_CONFIG": str(cfg)}
    got = run_probe(sys.executable, PROBE, "PARAMS", env, str(REPO / "dags"))
    assert got["errors"] == {}
    dag = got["dags"]["toy_stream"]
    assert list(dag["params"]) == ["source", "window_s", "slack_s", "on_violation", "config"]
    assert dag["params"]["slack_s"] == 0.25
    assert {t: v["stage"] for t, v in dag["tasks"].items()} == {
        "toy_interval": "toy-stream", "validate_toy": "validate-toy", "quality_report": "report",
    }  # fmt: skip
    monkeypatch.syspath_prepend(toy)
    registry.operators.cache_clear()
    try:
        parser = build_parser()
        job = registry.operator("toy").job
        for task in ("toy_interval", "validate_toy"):
            args = parser.parse_args(dag["tasks"][task]["args"])
            assert job.from_options(vars(args)) == job.from_options(dag["params"])
    finally:
        registry.operators.cache_clear()
