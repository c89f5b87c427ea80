"""### The whole pipeline on the demo data

One task per step, each a Spark stage (`python -m outoforder.stages demo --steps <step>`):

1. **ingest**: the real datasets of the shared data folder into `bronze/arrivals` (bad lines to
   `bronze/quarantine`);
2. **replay**: synthetic soccer play delayed by the `preset` disorder model, ingested;
3. **stats**: disorder statistics of every source;
4. **bronze**: Great Expectations over bronze;
5. **join**: QJoin and the K-slack baselines side by side against the exact join;
6. **stream_join**: the stream join as the `join_stream` DAG runs it, a pass per step of arrivals
   with the retention adapted every L inside it, then its recall check;
7. **aggregates**: HPM's sliding-window sums with the Γ-rule repairs and a final repair, then the
   (ε, δ) and exactness checks;
8. **theta**: a θ-join backfill with its completeness check;
9. **topk**: the continuous top-k with its adaptive cache duration, then its checks;
10. **quality_report**: the quality report (cumulative and this run's page) and the headline tables.

Every step is idempotent: re-running the DAG changes nothing that is done already. The steps report
missed targets without failing (the production DAGs fail on them).

Thin: one out-of-process Spark stage per step of ``python -m outoforder.stages demo --steps ...``,
then the quality report with the headline tables.
"""

from __future__ import annotations

import pendulum
from _spark_stage import default_args
from airflow.sdk import Param, chain, dag
from outoforder_airflow.operators import RUN_NAME, StageOperator, close_run

from outoforder.stages import spec
from outoforder.stages.demo import STEPS


@dag(
    dag_id="pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "main"],
    doc_md=__doc__,
    default_args=default_args(1),
    params={
        "preset": Param("", type="string", description="disorder preset of the replay (empty: the config's)"),
        spec.CONFIG.name: Param(spec.CONFIG.default, **spec.CONFIG.json_schema()),
    },
)
def pipeline() -> None:
    """Every step of the demo, in order, then the report."""
    steps = [
        StageOperator(
            task_id=step.replace("-", "_"),
            stage="demo",
            stage_args=["--steps", step, "--run-name", RUN_NAME, "--preset", "{{ params.preset }}"],
        )
        for step in STEPS
    ]
    report = StageOperator(
        task_id="quality_report",
        stage="report",
        report=True,
        stage_args=["--headline"],
        trigger_rule="all_done",
    )
    chain(*steps, report)
    close_run()


pipeline()
