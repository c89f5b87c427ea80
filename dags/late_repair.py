"""Late-tuple repair DAG (HPM's batch module): runs when the ledger meets the Γ rule.

Thin: one out-of-process Spark stage (``aggregate-repair``) and the checks. Scheduled on the asset
that ``aggregate_stream`` emits when the pending late tuples span more than Γ.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from _spark_stage import AGG_ARGS, LEDGER_DUE_URI, agg_params, delta_jars, submit_kwargs
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, dag

_SUBMIT = submit_kwargs()  # the settings are read once per parse

DOC = """
### Repair late tuples: make the aggregates exact

**repair** (`python -m outoforder.stages aggregate-repair`) takes the late tuples pending in
`silver/agg_ledger`, recomputes every window they belong to exactly from bronze (reading only those
windows' event-time ranges) and MERGEs the results into `gold/agg_results`: a changed value gets a
new version, `final = true`, the previous value and the late tuples that caused the change. The
repair is logged in `gold/agg_repairs` (rows read vs rows in the affected windows, windows changed).
Re-running it changes nothing. Trigger it by hand with `force = true` to repair below Γ (for example
at the end of a stream).

**validate_aggregate** then checks that every window without pending late tuples equals the exact
recomputation (100 %) and that every window is present exactly once.

Use the same job parameters as the `aggregate_stream` runs it serves (they identify the job).
"""


@dag(
    dag_id="late_repair",
    schedule=[Asset(LEDGER_DUE_URI)],
    start_date=pendulum.datetime(1970, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "aggregate", "repair"],
    doc_md=DOC,
    user_defined_macros={"delta_jars": delta_jars},
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30), "owner": "outoforder"},
    params={**agg_params(), "force": False},
)
def late_repair() -> None:
    """Repair, then check."""
    repair = SparkSubmitOperator(
        task_id="repair",
        name="outoforder-aggregate-repair",
        application_args=["aggregate-repair", *AGG_ARGS, "--force", "{{ params.force }}"],
        **_SUBMIT,
    )
    validate_aggregate = SparkSubmitOperator(
        task_id="validate_aggregate",
        name="outoforder-validate-aggregate",
        application_args=["validate-aggregate", *AGG_ARGS, "--on-violation", "{{ params.on_violation }}"],
        **_SUBMIT,
    )
    repair >> validate_aggregate


late_repair()
