"""### Compact and vacuum the lake

**maintain** (`python -m outoforder.stages maintain`) runs, table after table, Delta's OPTIMIZE
(bin-packing small files into large ones) and VACUUM (deleting files that no snapshot of the
table's retention period uses: `delta.deletedFileRetentionDuration`, 2 days on the project's tables).

Safe beside the other DAGs: both operations commit like any writer, so a conflict with a stage
writing the same table at that moment is detected by Delta and the loser retries the whole
operation (stages and maintenance alike). Within the retention period, a stage or report still
reading an older snapshot finds its files; the repairs read current snapshots only. See docs/reliability.md.

Thin: one out-of-process Spark stage (``maintain``). Interval stages append a few files per run,
so tables fill with small files; OPTIMIZE rewrites them into few large ones, VACUUM deletes the
files that no snapshot of the retention period (Delta's ``delta.deletedFileRetentionDuration``,
2 days on the project's tables, as the log's retention) uses.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from _spark_stage import default_args
from airflow.sdk import Param, dag
from outoforder_airflow.operators import StageOperator, close_run

from outoforder.stages import spec


@dag(
    dag_id="maintenance",
    schedule=timedelta(days=1),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "maintenance"],
    doc_md=__doc__,
    default_args=default_args(retry_delay=timedelta(minutes=5)),
    params={spec.CONFIG.name: Param(spec.CONFIG.default, **spec.CONFIG.json_schema())},
)
def maintenance() -> None:
    """OPTIMIZE and VACUUM every table."""
    StageOperator(
        task_id="maintain",
        stage="maintain",
    )
    close_run()


maintenance()
