"""Stream join DAG: one arrival-time interval per run -> gold/join_results, then the GX checks.

Thin: two out-of-process Spark stages (``join-stream``, ``validate-join``); the state between runs
lives in Delta (silver/join_state, silver/join_buffer): runs go one at a time, a run's stage
starts where the job stopped, and re-running an interval changes nothing.
"""

from __future__ import annotations

from datetime import timedelta

from _spark_stage import INTERVAL_DAG, JOIN_ARGS, join_params, quality_report
from airflow.sdk import dag
from outoforder_airflow.operators import StageOperator, judged_args

INTERVAL = timedelta(minutes=1)

DOC = """
### Stream join (QJoin), one arrival interval per run

1. **join_interval** (`python -m outoforder.stages join-stream`) joins the bronze arrivals of the
   run's data interval (by arrival time) with QJoin: each tuple is joined at once with the other
   stream's buffered tuples; the retention in force comes from `silver/join_params` (DAG
   `join_adapt`). Pairs are MERGEd into `gold/join_results` with the interval, the retention and
   the parameter version; the operator state is carried to the next run in Delta.
2. **validate_join** computes the recall of the periods P that closed in the run's interval
   against the exact join of bronze (`gold/join_metrics`; the exact join runs in Spark, and the
   work follows the interval, not the history) and runs Great Expectations: no duplicate result
   pairs among them, recall >= `q_user` in each. `on_violation = warn` reports without failing the run.

Runs go one at a time; each run's stage starts where the job stopped, adapting the retention before
each minute, and a failed check holds up no later run. A manual run (trigger button, `airflow dags
test`) has no interval of its own and joins the minute of arrivals before its logical date. For past
data (a replay's arrival times) use `airflow backfill create --dag-id join_stream --from-date ...
--to-date ...`.
"""


@dag(
    dag_id="join_stream",
    schedule=INTERVAL,
    tags=["outoforder", "join", "gold"],
    doc_md=DOC,
    params=join_params(),
    **INTERVAL_DAG,
)
def join_stream() -> None:
    """Join one interval, then check the quality so far."""
    join_interval = StageOperator(
        task_id="join_interval",
        stage="join-stream",
        stage_args=JOIN_ARGS,  # the stage adapts at the job's cadence, at most once per interval
        interval=INTERVAL,
        catch_up=True,
    )
    validate_join = StageOperator(
        task_id="validate_join",
        stage="validate-join",
        stage_args=[*JOIN_ARGS, *judged_args(INTERVAL)],
        validation=True,
    )
    report = quality_report("join", INTERVAL)
    join_interval >> validate_join >> report


join_stream()
