"""### Adapt the stream join's retention

**adapt** (`python -m outoforder.stages join-adapt`) computes, from the history before the end of
the run's data interval, the quality the next interval must deliver (Q_L, the paper's eq. 3) and
the cheapest per-stream retention (d_R, d_S) expected to reach it (Algorithm 1 with the chosen
estimator: `learned` = required retention of the exact pairs so far, `paper` = modelled from the
delay distributions). The choice and its statistics go to `silver/join_params`; `join_stream` runs
use it from then on. Re-running an interval rewrites the same row.

Use the same job parameters as the `join_stream` runs it serves (they identify the job).

Thin: one out-of-process Spark stage (``join-adapt``). It reads bronze (the exact join so far) and
gold/join_results (what the stream produced), and writes silver/join_params: the (d_R, d_S) in
force from the end of the run's interval, with the statistics they came from.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from _spark_stage import default_args, job_args, job_params
from airflow.sdk import dag
from outoforder_airflow.operators import INTERVAL_END, StageOperator


@dag(
    dag_id="join_adapt",
    schedule=timedelta(minutes=10),
    # arrival clocks of replays start near the epoch (the DEBS 2013 game clock): backfills over
    # them must lie after the start date; catchup is off, so no run is created for the past
    start_date=pendulum.datetime(1970, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "join", "adaptation"],
    doc_md=__doc__,
    default_args=default_args(),
    params=job_params("join"),
)
def join_adapt() -> None:
    """Adapt the retention from the history."""
    StageOperator(
        task_id="adapt",
        stage="join-adapt",
        stage_args=[*job_args("join"), "--until", INTERVAL_END],
    )


join_adapt()
