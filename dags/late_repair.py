"""### Repair late tuples: make the aggregates exact

**repair** (`python -m outoforder.stages aggregate-repair`) takes the late tuples pending in
`silver/agg_ledger`, recomputes every window they belong to exactly from bronze (reading only those
windows' event-time ranges) and MERGEs the results into `gold/agg_results`: a changed value gets a
new version, `final = true`, the previous value and the late tuples that caused the change. The
repair is logged in `gold/agg_repairs` (rows read vs rows in the affected windows, windows changed).
Re-running it changes nothing. Trigger it by hand with `force = true` to repair below Γ (for example
at the end of a stream).

**validate_aggregate** then checks the windows the repair recomputed (`--repaired`: the work follows
the repair, not the history): every one without pending late tuples equals the exact recomputation
(100 %) and is present exactly once. The windows of each minute are checked as they close by
`aggregate_stream`; to check the whole history at once, run `validate-aggregate` without
`--repaired`. **quality_report** writes the run's page with the aggregates' section.

Use the same job parameters as the `aggregate_stream` runs it serves (they identify the job).

Thin: one out-of-process Spark stage (``aggregate-repair``) and the checks. Scheduled on the asset
that ``aggregate_stream`` emits when the pending late tuples span more than Γ.
"""

from __future__ import annotations

import pendulum
from _spark_stage import LEDGER_DUE_URI, default_args, job_args, job_params
from airflow.sdk import Asset, dag
from outoforder_airflow.assets import QualityEvent
from outoforder_airflow.operators import StageOperator, close_run


@dag(
    dag_id="late_repair",
    schedule=[Asset(LEDGER_DUE_URI)],
    start_date=pendulum.datetime(1970, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "aggregate", "repair"],
    doc_md=__doc__,
    default_args=default_args(),
    params={**job_params("aggregate"), "force": False},
)
def late_repair() -> None:
    """Repair, then check."""
    repair = StageOperator(
        task_id="repair",
        stage="aggregate-repair",
        stage_args=[*job_args("aggregate"), "--force", "{{ params.force }}"],
    )
    validate_aggregate = StageOperator(
        task_id="validate_aggregate",
        stage="validate-aggregate",
        stage_args=[*job_args("aggregate"), "--repaired"],
        validation=True,
    )
    report = StageOperator(
        task_id="quality_report",
        stage="report",
        stage_args=["--sections", "aggregate"],
        report=True,
        trigger_rule="all_done",
    )
    repaired = QualityEvent(check=validate_aggregate.task_id, tables=["gold/agg_results"])
    repair >> validate_aggregate >> [repaired, report]
    close_run()


late_repair()
