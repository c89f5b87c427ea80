"""### Sliding-window aggregates with HPM, one pass per run

1. **aggregate_interval** (`python -m outoforder.stages aggregate-stream`) processes, in one pass,
   every bronze arrival the job has not processed yet up to the end of the run's data interval:
   windows close when the stream has passed them by the buffer K; their aggregates go to
   `gold/agg_results` (version 1, produced by the stream); every tuple that arrives after a window
   it belongs to closed goes to the late-tuple ledger `silver/agg_ledger`. Each closed window's
   coverage and the K it needed drive the controller as it is observed: the lateness controller
   (K = what the recent windows needed, at most `latency_bound_s`), or with `controller = paper`
   HPM's PD controller of α (K = α · largest delay); the ledger keeps each observation too. The
   run's log states what K the target needs and, under a bound, whether it is reachable. State is
   carried to the next run in Delta; a run that finds the job behind catches up in the same pass.
2. **gamma_rule** reads the ledger status the stage wrote: are the pending late tuples spread over
   more than Γ of event time? If so **ledger_due** emits the asset that triggers `late_repair`.
3. **validate_aggregate** (Great Expectations) over the windows that closed in the run's interval
   (the exact values recomputed in Spark from their tuples only): each stored once; (ε, δ) met at
   emission; those without pending late tuples exact. Under `latency_bound_s` it also checks the target was
   reachable: a miss the bound made unavoidable is a warning naming the bound needed, not a failure.
   `on_violation = warn` reports without failing.

Runs go one at a time, each starting where the job stopped. A manual run processes up to its
logical date; for past data use `airflow backfill create --dag-id
aggregate_stream --from-date ... --to-date ...` (its runs' passes one at a time, the oldest first,
each exactly its minute). A failed stage or check fails the run (**run_outcome**).

Thin: out-of-process Spark stages (``aggregate-stream``, ``validate-aggregate``) and one tiny
Python check that reads the ledger status file the stage leaves (no Spark, no Delta). When the
pending late tuples span more than Γ, ``ledger_due`` emits the asset that starts ``late_repair``.
"""

from __future__ import annotations

from _spark_stage import INTERVAL_DAG, LEDGER_DUE_URI, every, job_args, job_params, quality_report
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import Asset, dag, task
from outoforder_airflow.assets import QualityEvent
from outoforder_airflow.operators import STREAM_INTERVAL, StageOperator, close_run, judged_args

INTERVAL = STREAM_INTERVAL


@task.short_circuit
def gamma_rule(params: dict[str, object] | None = None) -> bool:
    """True when the ledger status says the Γ rule calls for a repair (skips ledger_due otherwise)."""
    import logging

    from outoforder.config import load_settings
    from outoforder.stages.aggregate.ledger import read_status
    from outoforder.stages.aggregate.spec import AggJob

    log = logging.getLogger("airflow.task")
    if not params:  # Airflow passes the run's params; only a bare call has none
        msg = "gamma_rule needs the run's params"
        raise RuntimeError(msg)
    settings = load_settings(str(params["config"]) or None)
    status = read_status(settings, str(params["source"]), AggJob.from_options(params))
    if status is None:
        log.info("no ledger status yet: nothing to repair")
        return False
    log.info("ledger status: %s", status)
    return bool(status["repair_due"])


@dag(
    dag_id="aggregate_stream",
    schedule=every(INTERVAL),
    tags=["outoforder", "aggregate", "gold"],
    doc_md=__doc__,
    params=job_params("aggregate"),
    **INTERVAL_DAG,
)
def aggregate_stream() -> None:
    """Aggregate one interval; trigger a repair when due; check the quality so far."""
    aggregate_interval = StageOperator(
        task_id="aggregate_interval",
        stage="aggregate-stream",
        stage_args=job_args("aggregate"),
        interval=INTERVAL,
        catch_up=True,
    )
    ledger_due = EmptyOperator(task_id="ledger_due", outlets=[Asset(LEDGER_DUE_URI)])
    validate_aggregate = StageOperator(
        task_id="validate_aggregate",
        stage="validate-aggregate",
        stage_args=[*job_args("aggregate"), *judged_args(INTERVAL)],
        validation=True,
    )
    aggregate_interval >> gamma_rule() >> ledger_due
    aggregate_interval >> validate_aggregate
    report = quality_report("aggregate", INTERVAL)
    # the check's verdict on the results' asset events, whatever it ended as
    validate_aggregate >> [
        QualityEvent(check=validate_aggregate.task_id, tables=["gold/agg_results"]),
        report,
    ]
    close_run()


aggregate_stream()
