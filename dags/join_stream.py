"""### Stream join (QJoin), one arrival interval per run

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

Thin: two out-of-process Spark stages (``join-stream``, ``validate-join``); the state between runs
lives in Delta (silver/join_state, silver/join_buffer): runs go one at a time, a run's stage
starts where the job stopped, and re-running an interval changes nothing.
"""

from __future__ import annotations

from _spark_stage import interval_dag  # an Airflow DAG: the factory builds it with airflow.sdk.dag

DAG = interval_dag("join", doc=__doc__)
