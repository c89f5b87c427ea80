"""Ingest DAG: raw files -> bronze arrivals / quarantine / ingest log (Delta) -> GX checks.

Thin on purpose: it only wires two out-of-process Spark stages. Nothing heavy is imported at parse
time (``outoforder.config`` is standard library only; pyspark is never imported here).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag

from outoforder.config import REPO_ROOT, load_settings

_SETTINGS = load_settings()
_APP = str(REPO_ROOT / "pipelines" / "outoforder" / "stages" / "spark_entry.py")
_SUBMIT = {
    "application": _APP,
    "conn_id": "spark_default",  # master local[2] by default (README)
    "conf": {k: v for k, v in _SETTINGS.spark.to_conf().items() if k != "spark.jars"},
    "jars": _SETTINGS.spark.to_conf()["spark.jars"],
    "env_vars": {"OOO_CONFIG": "{{ params.config }}"},
    "verbose": False,
}

DOC = """
### Ingest raw files into bronze

1. **ingest** (`python -m outoforder.stages ingest`) reads the chosen datasets and appends every
   accepted row to `bronze/arrivals` and every rejected line, with its reason, to
   `bronze/quarantine`; one row per file goes to `bronze/ingest_log`. Re-running is a no-op for
   files already ingested (content hash), and resumes a file whose ingest was interrupted.
2. **validate_bronze** runs the Great Expectations suites `bronze_arrivals` and
   `bronze_accounting` (rows read = accepted + quarantined for every file) and fails on violation.

Params: `datasets` -- built-in dataset ids or prefixes (`all`, `ooo`, `debs2013/mini_soccer`, ...);
`config` -- an optional TOML file overriding `include/config/outoforder.toml`.
"""


@dag(
    dag_id="ingest",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "bronze", "ingest"],
    doc_md=DOC,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30), "owner": "outoforder"},
    params={
        "datasets": Param("all", type="string", description="dataset ids/prefixes, comma-separated"),
        "config": Param("", type="string", description="path of a TOML config override"),
    },
)
def ingest() -> None:
    """Ingest the chosen datasets, then check bronze."""
    ingest = SparkSubmitOperator(
        task_id="ingest",
        name="outoforder-ingest",
        application_args=["ingest", "--datasets", "{{ params.datasets }}"],
        **_SUBMIT,
    )
    validate_bronze = SparkSubmitOperator(
        task_id="validate_bronze",
        name="outoforder-validate-bronze",
        application_args=["validate-bronze"],
        **_SUBMIT,
    )
    ingest >> validate_bronze


ingest()
