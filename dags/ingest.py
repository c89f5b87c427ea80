"""### Ingest raw files into bronze

1. **plan** checks the `datasets` parameter against the catalogue of built-in datasets and fails
   at once, without starting Spark, if a name is unknown.
2. **ingest** (`python -m outoforder.stages ingest`) reads the chosen datasets and appends every
   accepted row to `bronze/arrivals` and every rejected line, with its reason, to
   `bronze/quarantine`; one row per file goes to `bronze/ingest_log`. Re-running is a no-op for
   files already ingested (content hash), and resumes a file whose ingest was interrupted.
3. **validate_bronze** runs the Great Expectations suites `bronze_arrivals` and
   `bronze_accounting` (rows read = accepted + quarantined for every file) and fails on violation.

Params: `datasets` -- built-in dataset ids or prefixes (`all`, `ooo`, `debs2013/mini_soccer`, ...);
`config` -- an optional TOML file overriding `include/config/outoforder.toml`.

Thin on purpose: it only wires two out-of-process Spark stages. Nothing heavy is imported at parse
time (``outoforder.config`` is standard library only; pyspark is never imported here).
"""

from __future__ import annotations

import pendulum
from _spark_stage import default_args
from airflow.sdk import Param, dag, task
from outoforder_airflow.operators import StageOperator, close_run

from outoforder.stages import spec


@dag(
    dag_id="ingest",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "bronze", "ingest"],
    doc_md=__doc__,
    default_args=default_args(),
    params={
        "datasets": Param("all", type="string", description="dataset ids/prefixes, comma-separated"),
        **{s.name: Param(s.default, **s.json_schema()) for s in (spec.ON_VIOLATION, spec.CONFIG)},
    },
)
def ingest() -> None:
    """Plan, ingest the chosen datasets, then check bronze."""

    @task(retries=0)
    def plan(datasets: str) -> str:
        """Resolve dataset ids/prefixes to source ids (fails on unknown names)."""
        import logging

        from outoforder.sources.catalog import select

        names = datasets.replace(",", " ").split()
        chosen = [d.source for d in select(names or None)]
        logging.getLogger("airflow.task").info("ingesting %d datasets: %s", len(chosen), ", ".join(chosen))
        return " ".join(chosen)

    ingest = StageOperator(
        task_id="ingest",
        stage="ingest",
        stage_args=["--datasets", "{{ ti.xcom_pull(task_ids='plan') }}"],
    )
    validate_bronze = StageOperator(
        task_id="validate_bronze",
        stage="validate-bronze",
        validation=True,
    )
    report = StageOperator(task_id="quality_report", stage="report", report=True, trigger_rule="all_done")
    plan("{{ params.datasets }}") >> ingest >> validate_bronze >> report
    close_run()


ingest()
