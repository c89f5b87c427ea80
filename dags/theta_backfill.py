r"""### θ-join backfill (FastThetaJoin), one event-time interval per run

1. **theta_join** (`python -m outoforder.stages theta-join`) cuts the run's data interval (event
   time) into tumbling windows of `window_s` and joins, per window, the streams `S0, S1, …` of the
   bronze source on `S0.column θ0 S1.column θ1 S2.column …` (FastThetaJoin by default; CFS,
   1-Bucket-Theta, Spark SQL's join and the plain cross product are the alternatives). The results
   and per-window counters (rows and null rows per stream, output rows, rows compared, partition
   pairs, seconds) replace exactly this interval in `gold/theta_results` and `gold/theta_windows`.
2. **validate_theta** (Great Expectations): every window of the interval ran, no result repeats,
   and for `sample` windows the stored count equals DuckDB's count of the same join over bronze.

`window_s` must divide the one-minute interval: runs fire on the minute, so every scheduled
interval is cut at the windows. A source with no rows in bronze skips the run (saying what
bronze has); a failed join or check fails it (**run_outcome**). Over past data:

    airflow backfill create --dag-id theta_backfill \
        --from-date 1970-01-01T02:59:00 --to-date 1970-01-01T03:00:00

(the demo replays' event clock starts 10,753 s after the epoch). Re-running a range changes nothing.

Thin: two out-of-process Spark stages (``theta-join``, ``validate-theta``). Runs are independent
(each replaces exactly its interval), so backfills may overlap processed ranges, and a backfill's
runs side by side retry a commit one of them lost to the other inside the stage.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from _spark_stage import default_args, every, job_args, job_params, quality_report
from airflow.sdk import dag
from outoforder_airflow.operators import StageOperator, close_run

INTERVAL = timedelta(minutes=1)


@dag(
    dag_id="theta_backfill",
    schedule=every(INTERVAL),  # on the minute: a run's interval is cut at the windows
    start_date=pendulum.datetime(1970, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "theta-join", "backfill", "gold"],
    doc_md=__doc__,
    default_args=default_args(),
    params=job_params("theta"),
)
def theta_backfill() -> None:
    """Join the interval's windows, then check completeness."""
    theta_join = StageOperator(
        task_id="theta_join",
        stage="theta-join",
        stage_args=job_args("theta"),
        interval=INTERVAL,
    )
    validate_theta = StageOperator(
        task_id="validate_theta",
        stage="validate-theta",
        stage_args=[*job_args("theta"), "--sample", "{{ params.sample }}"],
        interval=INTERVAL,
        validation=True,
    )
    report = quality_report("theta", INTERVAL)
    theta_join >> validate_theta >> report
    close_run()


theta_backfill()
