"""Every DAG file imports cleanly, follows the house rules, and is wired as documented."""

from __future__ import annotations

import sys

import pytest

from tests.airflow.conftest import REPO, run_probe

pytestmark = pytest.mark.airflow

EXPECTED_STRUCTURE = {
    "ingest_landing": {
        "wait_for_files": {"ingest"},
        "ingest": {"validate_bronze"},
        "validate_bronze": {"quality_report"},
        "quality_report": set(),
    },
    "ingest_kafka": {
        "ingest": {"validate_bronze"},
        "validate_bronze": set(),
    },
    "ingest": {
        "plan": {"ingest"},
        "ingest": {"validate_bronze"},
        "validate_bronze": {"quality_report"},
        "quality_report": set(),
    },
    "join_stream": {
        "join_interval": {"validate_join"},
        "validate_join": {"quality_report", "quality_event"},
        "quality_event": set(),
        "quality_report": set(),
    },
    "maintenance": {"maintain": set()},
    "aggregate_stream": {
        "aggregate_interval": {"gamma_rule", "validate_aggregate"},
        "gamma_rule": {"ledger_due"},
        "ledger_due": set(),
        "validate_aggregate": {"quality_report", "quality_event"},
        "quality_event": set(),
        "quality_report": set(),
    },
    "late_repair": {
        "repair": {"validate_aggregate"},
        "validate_aggregate": {"quality_report", "quality_event"},
        "quality_event": set(),
        "quality_report": set(),
    },
    "theta_backfill": {
        "theta_join": {"validate_theta"},
        "validate_theta": {"quality_report"},
        "quality_report": set(),
    },
    "pipeline": {
        "ingest": {"replay"},
        "replay": {"stats"},
        "stats": {"bronze"},
        "bronze": {"join"},
        "join": {"stream_join"},
        "stream_join": {"aggregates"},
        "aggregates": {"theta"},
        "theta": {"topk"},
        "topk": {"quality_report"},
        "quality_report": set(),
    },
    "join_results_consumer": {"gate": {"use"}, "use": set()},
    "topk_stream": {
        "topk_interval": {"validate_topk"},
        "validate_topk": {"quality_report", "quality_event"},
        "quality_event": set(),
        "quality_report": set(),
    },
}

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])  # as Airflow does: the DAGs folder is importable (shared helpers)
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
out = {
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "heavy": sorted(m for m in sys.modules
                    if m.split(".")[0] in ("pyspark", "delta", "pandas", "great_expectations")),
    "dags": {
        d.dag_id: {
            "tags": sorted(d.tags), "doc": bool(d.doc_md), "max_active_runs": d.max_active_runs,
            "catchup": d.catchup,
            "tasks": {t.task_id: {"retries": t.retries, "down": sorted(t.downstream_task_ids),
                                  "depends_on_past": t.depends_on_past,
                                  "max_active_tis_per_dag": t.max_active_tis_per_dag,
                                  "trigger_rule": getattr(t.trigger_rule, "value", str(t.trigger_rule)),
                                  "inlets": [getattr(a, "name", str(a)) for a in t.inlets],
                                  "outlets": [getattr(a, "name", str(a)) for a in t.outlets]}
                      for t in d.tasks},
        } for d in bag.dags.values()
    },
}
print("PROBE" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def probe(airflow_env):
    # A fresh interpreter, so that nothing imported by pytest itself hides a parse-time import.
    return run_probe(sys.executable, PROBE, "PROBE", airflow_env, str(REPO / "dags"))


def test_no_import_errors(probe):
    assert probe["errors"] == {}


def test_no_heavy_imports_at_parse_time(probe):
    assert probe["heavy"] == []


def test_every_expected_dag_is_present_and_nothing_else(probe):
    assert set(probe["dags"]) == set(EXPECTED_STRUCTURE)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_STRUCTURE))
def test_policy_tags_docs_retries(probe, dag_id):
    dag = probe["dags"][dag_id]
    assert "outoforder" in dag["tags"]
    assert dag["doc"]
    # every Spark task retries; only pure validation tasks (named plan), the run's verdict
    # (run_outcome: it re-reads the same failure) and the verdict's asset event may fail at once
    once = ("plan", "run_outcome", "quality_event")
    assert all(t["retries"] >= 1 for tid, t in dag["tasks"].items() if tid not in once)


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_STRUCTURE))
def test_task_wiring(probe, dag_id):
    got = {tid: set(t["down"]) for tid, t in probe["dags"][dag_id]["tasks"].items()}
    # and every DAG closes with run_outcome, downstream of every task (the next test)
    expected = {tid: {*down, "run_outcome"} for tid, down in EXPECTED_STRUCTURE[dag_id].items()}
    assert got == {**expected, "run_outcome": set()}


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_STRUCTURE))
def test_a_failed_task_fails_its_run(probe, dag_id):
    # Airflow derives a run's state from its leaves; the report runs after a failure (all_done)
    # and would leave the run green: the one leaf is run_outcome, which runs only when a task
    # failed and then fails (its trigger rule), so the run is failed exactly when a task failed
    tasks = probe["dags"][dag_id]["tasks"]
    leaves = [tid for tid, t in tasks.items() if not t["down"]]
    assert leaves == ["run_outcome"]
    assert tasks["run_outcome"]["trigger_rule"] == "one_failed"
    assert tasks["run_outcome"]["retries"] == 0


def test_dags_parse_even_where_the_jar_cache_is_not_configured(airflow_env):
    env = {k: v for k, v in airflow_env.items() if k != "OOO_SPARK_JARS_DIR"}
    got = run_probe(sys.executable, PROBE, "PROBE", env, str(REPO / "dags"))
    assert got["errors"] == {}


@pytest.mark.parametrize("dag_id", ["join_stream", "aggregate_stream", "topk_stream"])
def test_stream_runs_go_one_at_a_time_and_a_failed_check_holds_up_no_later_run(probe, dag_id):
    # the operator state of one interval is the input of the next: one run at a time, and the
    # stage catches up from where the job stopped instead of waiting on the previous run's tasks
    assert probe["dags"][dag_id]["max_active_runs"] == 1
    assert not any(t["depends_on_past"] for t in probe["dags"][dag_id]["tasks"].values())


STREAM_STAGES = [("join_stream", "join_interval"), ("aggregate_stream", "aggregate_interval"),
                 ("topk_stream", "topk_interval")]  # fmt: skip


@pytest.mark.parametrize(("dag_id", "stage"), STREAM_STAGES)
def test_a_stream_stage_runs_one_pass_at_a_time_across_runs_backfills_included(probe, dag_id, stage):
    # a backfill starts its runs side by side (its own max_active_runs, not the DAG's): the stage
    # task's own limit keeps the job's passes one at a time, the oldest interval first, so each
    # backfill run continues the state the previous one left
    tasks = probe["dags"][dag_id]["tasks"]
    assert tasks[stage]["max_active_tis_per_dag"] == 1
    assert all(t["max_active_tis_per_dag"] is None for tid, t in tasks.items() if tid != stage)


def test_every_run_ends_with_its_report_even_after_a_failed_task(probe):
    # a failed ingest or check still gets its run's report page (the report shows the failure)
    reports = {
        d: t for d, dag in probe["dags"].items() for tid, t in dag["tasks"].items() if tid == "quality_report"
    }
    assert len(reports) >= 8
    expected = dict.fromkeys(reports, "all_done")
    expected["ingest_landing"] = "none_skipped"  # unless its sensor skipped the run: nothing landed
    assert {d: t["trigger_rule"] for d, t in reports.items()} == expected


def test_the_tables_are_assets_and_the_checks_verdicts_go_on_the_results(probe):
    # every stage task reads and writes the tables the registry declares, as assets named after them
    from outoforder.stages import registry

    dags = probe["dags"]
    join = dags["join_stream"]["tasks"]
    assert set(join["join_interval"]["outlets"]) == set(registry.stage("join-stream").writes)
    assert "bronze/arrivals" in join["join_interval"]["inlets"]
    assert "gold/join_metrics" in join["validate_join"]["outlets"]
    ingest = dags["ingest_kafka"]["tasks"]["ingest"]
    assert "bronze/arrivals" in ingest["outlets"]
    # the verdict goes on the results' events, whatever the check ended as
    judged = {"join_stream": "gold/join_results", "aggregate_stream": "gold/agg_results",
              "topk_stream": "gold/topk_results", "late_repair": "gold/agg_results"}  # fmt: skip
    for dag_id, table in judged.items():
        event = dags[dag_id]["tasks"]["quality_event"]
        assert event["outlets"] == [table] and event["trigger_rule"] == "all_done", dag_id
    # so the asset graph runs from ingest through the stages to the checks and the reports
    written = {a for d in dags.values() for t in d["tasks"].values() for a in t["outlets"]}
    read = {a for d in dags.values() for t in d["tasks"].values() for a in t["inlets"]}
    assert {"bronze/arrivals", "gold/join_results", "gold/agg_results", "gold/topk_results"} <= written & read
