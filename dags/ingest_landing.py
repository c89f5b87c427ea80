"""### Ingest what lands in the landing bucket

Drop raw files into the object store at `<storage.landing_uri>/incoming/<reader>/<source id>/<file>`
(for instance `s3a://landing/incoming/ooo/ooo/my-run.csv.gz` with the MinIO of `infra/minio.sh`).

1. **wait_for_files** (a sensor, rescheduled every 30 s, for up to 4 minutes) succeeds as soon as
   a file waits; when none arrives, the run ends *skipped*.
2. **ingest** (`python -m outoforder.stages ingest --landing`) ingests every waiting file into
   bronze and moves it under `ingested/`. A file that cannot be ingested at all (wrong key shape,
   unknown reader) is moved under `rejected/` with a `.reason.txt` beside it; bad rows are
   quarantined as for any file. A file is never ingested twice: the ingest log keys files by
   content hash, so a rerun after a crash between ingest and move finds it done.
3. **validate_bronze** runs the bronze suites; **quality_report** writes the run's page (and
   uploads the reports when `storage.publish_uri` is set).

Thin on purpose: a sensor and out-of-process Spark stages; nothing heavy is imported at parse time.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from _spark_stage import default_args
from airflow.sdk import Param, dag
from outoforder_airflow.operators import StageOperator, close_run
from outoforder_airflow.sensors import LandingSensor

from outoforder.stages import spec


@dag(
    dag_id="ingest_landing",
    schedule=timedelta(minutes=5),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "bronze", "ingest", "landing"],
    doc_md=__doc__,
    default_args=default_args(),
    params={
        **{s.name: Param(s.default, **s.json_schema()) for s in (spec.ON_VIOLATION, spec.CONFIG)},
    },
)
def ingest_landing() -> None:
    """Wait for files, ingest them, check bronze."""
    wait = LandingSensor(
        task_id="wait_for_files",
        config="{{ params.config }}",
        mode="reschedule",
        poke_interval=30,
        timeout=240,
        soft_fail=True,  # nothing arrived: the run ends skipped; a failed listing still fails (retried)
    )
    ingest = StageOperator(task_id="ingest", stage="ingest", stage_args=["--landing"])
    validate_bronze = StageOperator(task_id="validate_bronze", stage="validate-bronze", validation=True)
    # none_skipped: no report for a run that found nothing, one even when a check failed
    report = StageOperator(task_id="quality_report", stage="report", report=True, trigger_rule="none_skipped")
    wait >> ingest >> validate_bronze >> report
    close_run()


ingest_landing()
