"""### An example consumer that runs only on join results that met their target

Copy it for your own downstream work. It is scheduled on the asset `gold/join_results`: every
event on it starts a run. The stream join's run writes the results (an event with the rows it
wrote, no verdict yet) and its `quality_event` task then puts the check's verdict on another event:
the periods judged, how many met Q_user, the share and the lowest recall, and `passed`.

1. **gate** reads the events that triggered the run and lets it go on only when a check judged
   the results and every such check passed (`outoforder_airflow.assets.judged_and_met`);
   otherwise it is skipped, saying why, and so is everything after it: results that missed their
   target are held back (the run is green, its tasks skipped).
2. **use** stands for your work on the released results: here it logs what was released.

A missed period is released once it is repaired: `join-repair` adds the pairs the stream missed,
and clearing the failed run's `validate_join` task in the UI judges the period again; its
`quality_event` then carries `passed` and starts a run that gets through the gate.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from _spark_stage import default_args
from airflow.sdk import dag, get_current_context, task
from outoforder_airflow.assets import judged_and_met, table_asset
from outoforder_airflow.operators import close_run

RESULTS = table_asset("gold/join_results")
log = logging.getLogger(__name__)


@dag(
    dag_id="join_results_consumer",
    schedule=[RESULTS],
    start_date=pendulum.datetime(1970, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "join", "example"],
    doc_md=__doc__,
    default_args=default_args(),
)
def join_results_consumer() -> None:
    """Gate on the quality of the triggering events, then use the results."""

    @task
    def gate() -> list[dict[str, Any]]:
        from airflow.sdk.exceptions import AirflowSkipException

        events = list(get_current_context()["triggering_asset_events"].get(RESULTS, []))
        released, why = judged_and_met(events)
        if not released:
            msg = f"held back: {why}"
            raise AirflowSkipException(msg)
        log.info("released: %s", why)
        return [dict(e.extra) for e in events if e.extra.get("judged")]

    @task
    def use(verdicts: list[dict[str, Any]]) -> None:
        for v in verdicts:
            log.info("results of %s: %s of %s periods met (lowest recall %s)", v.get("dag_run"),
                     v.get("met"), v.get("items"), v.get("recall_min"))  # fmt: skip

    use(gate())
    close_run()


join_results_consumer()
