"""### Continuous top-k over out-of-order sliding windows, one pass per run

1. **topk_interval** (`python -m outoforder.stages topk-stream`) replays, in one pass, every bronze
   arrival the job has not processed up to the end of the run's data interval through the
   continuous top-k operator (the modified MinTopk of the seed): a window is emitted once the
   stream's progress passes its end plus the cache duration K, and K adapts so that the accuracy
   (the share of the true top-k in the emitted list) stays at ε_min or above. Emitted windows and
   their lists go to `gold/topk_results`; tuples that arrive after their window's emission, every
   decision on K (the K_min trace) and every settled window to `silver/topk_ledger`. The operator's
   state is kept in `silver/topk_state`.
2. **validate_topk** (Great Expectations) over the windows that closed in the run's interval: each
   emitted exactly once (or all its tuples came late), and their mean accuracy, against the exact
   top-k recomputed in Spark from their tuples only, is at least ε_min.

The defaults are the seed's query (60 s windows sliding by 5 s, 30 windows per decision), as on the
command line; on a short replay set a smaller one in the run's Params or in `[dags.topk]` (the main
job's: `window_s = 4`, `slide_s = 0.5`, `n = 10`). For past data:
`airflow backfill create --dag-id topk_stream --from-date ... --to-date ...` (its runs' passes one at a
time, the oldest first, each exactly its minute).

Thin: two out-of-process Spark stages (``topk-stream``, ``validate-topk``); the operator's state
is carried from run to run in Delta, so runs go one at a time, each starting where the job stopped.
"""

from __future__ import annotations

from _spark_stage import interval_dag  # an Airflow DAG: the factory builds it with airflow.sdk.dag

DAG = interval_dag("topk", doc=__doc__)
