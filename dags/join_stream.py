"""### Stream join (QJoin), one pass per run

1. **join_interval** (`python -m outoforder.stages join-stream`) joins every bronze arrival the job
   has not processed yet, up to the end of the run's data interval (by arrival time; a topic's
   arrivals once the Kafka ingest has covered them), in one pass: each tuple is joined at once with
   the other stream's buffered tuples, and every L of stream progress the controller re-chooses
   each stream's retention from what arrived before (`silver/join_params`, with its statistics).
   Pairs go to `gold/join_results` with the retention and the decision in force; the operator's
   state is carried to the next run in `silver/join_state`. A run that finds the job behind (a
   failed or skipped run) catches up in the same single pass, and the results are the same
   however the runs cut the stream.
2. **validate_join** computes the recall of the periods P that closed in the run's interval
   against the exact join of bronze (`gold/join_metrics`; the exact join runs in Spark, and the
   work follows the interval, not the history) and runs Great Expectations: no duplicate result
   pairs among them, recall >= `q_user` in the share `quality.periods_met` of them (a budget of one
   miss in twenty periods). `on_violation = warn` reports without failing the run.
3. **quality_event** puts the check's verdict (periods judged and met, the lowest recall, passed
   or not) on the asset event of `gold/join_results`, whatever the check ended as: the asset's
   page is the join's quality per interval, and a consumer can gate on it
   (`join_results_consumer`).

Runs go one at a time, and a failed check holds up no later run, but fails its own (the last
task, **run_outcome**, fails a run whose stage or check failed). A manual run (trigger button,
`airflow dags test`) has no interval of its own and joins up to its logical date. For past data
(a replay's arrival times) use `airflow backfill create --dag-id join_stream --from-date ...
--to-date ...`: its runs process exactly their minutes, one pass at a time, the oldest first. A
scheduled run whose source has sent nothing yet is skipped, saying what bronze has.

Thin: two out-of-process Spark stages (``join-stream``, ``validate-join``); the state between runs
lives in Delta (silver/join_state): runs go one at a time, and re-running a processed interval
changes nothing.
"""

from __future__ import annotations

from _spark_stage import interval_dag  # an Airflow DAG: the factory builds it with airflow.sdk.dag

DAG = interval_dag("join", doc=__doc__)
