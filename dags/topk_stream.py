"""Continuous top-k DAG: one arrival-time interval per run -> gold/topk_results, then GX checks.

Thin: two out-of-process Spark stages (``topk-stream``, ``validate-topk``); the operator's state
is carried from run to run in Delta, so runs go one at a time, each starting where the job stopped.
"""

from __future__ import annotations

from datetime import timedelta

from _spark_stage import INTERVAL_DAG, TOPK_ARGS, quality_report, topk_params
from airflow.sdk import dag
from outoforder_airflow.operators import StageOperator, judged_args

INTERVAL = timedelta(minutes=1)

DOC = """
### Continuous top-k over out-of-order sliding windows, one arrival interval per run

1. **topk_interval** (`python -m outoforder.stages topk-stream`) replays the bronze arrivals of the
   run's data interval through the continuous top-k operator (the modified MinTopk of the seed):
   a window is emitted once the stream's progress passes its end plus the cache duration K, and K
   adapts so that the accuracy (the share of the true top-k in the emitted list) stays at ε_min or
   above. Emitted windows go to `gold/topk_windows` and `gold/topk_results`, tuples that arrive
   after their window's emission to `silver/topk_late`, and every change of K to
   `silver/topk_cache` (the K_min trace). The operator's state is kept in `silver/topk_state`.
2. **validate_topk** (Great Expectations) over the windows that closed in the run's interval: each
   emitted exactly once (or all its tuples came late), and their mean accuracy, against the exact
   top-k recomputed in Spark from their tuples only, is at least ε_min.

The defaults fit the demo's 20 s replay (4 s windows sliding by 0.5 s, 10 queries per decision);
the seed's query is `window_s = 60`, `slide_s = 5`, `n = 30`. For past data:
`airflow backfill create --dag-id topk_stream --from-date ... --to-date ...` (in order: one run at a time).
"""


@dag(
    dag_id="topk_stream",
    schedule=INTERVAL,
    tags=["outoforder", "topk", "gold"],
    doc_md=DOC,
    params=topk_params(),
    **INTERVAL_DAG,
)
def topk_stream() -> None:
    """Rank one interval's arrivals; check the accuracy so far."""
    topk_interval = StageOperator(
        task_id="topk_interval",
        stage="topk-stream",
        stage_args=TOPK_ARGS,
        interval=INTERVAL,
        catch_up=True,
    )
    validate_topk = StageOperator(
        task_id="validate_topk",
        stage="validate-topk",
        stage_args=[*TOPK_ARGS, *judged_args(INTERVAL)],
        validation=True,
    )
    report = quality_report("topk", INTERVAL)
    topk_interval >> validate_topk >> report


topk_stream()
