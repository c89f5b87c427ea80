"""The lake's tables as Airflow assets, and their quality on the asset events.

Every table a stage reads or writes is an asset named after it (``gold/join_results``), declared
once from the operators' registry (:class:`outoforder.stages.registry.Stage`'s ``reads``,
``writes`` and ``judges``): a :class:`~outoforder_airflow.operators.StageOperator` gets them as
its inlets and outlets, so Airflow's asset graph shows ingest → stages → checks → repair →
reports. A stage's run records what it did to each table (:mod:`outoforder.io.figures`) and
its task puts that on the table's asset event: the span and the rows a stream pass wrote.

A check's verdict goes on the event of the table it judged, by :class:`QualityEvent`, a task
that runs whatever the check ended as: the periods or windows judged, how many met the target,
the share and the worst value, and whether the run passed. The Assets page of a results table
then reads as its quality per interval, misses included; a consumer DAG scheduled on the asset
gates on those figures (:func:`judged_and_met`, ``dags/gated_consumer.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset, BaseOperator

FIGURES_KEY = "figures"  # the XCom a stage task leaves its run's figures in (per table)
GROUP = "outoforder"


def run_facts(context: Any) -> dict[str, Any]:
    """What every event of a run carries: the DAG run, and the end of the interval it covered."""
    facts: dict[str, Any] = {"dag_run": context["run_id"]}
    if context.get("data_interval_end") is not None:
        facts["interval_end"] = context["data_interval_end"].isoformat()
    return facts


def table_asset(table: str) -> Asset:
    """The asset of a lake table, e.g. ``gold/join_results`` (one per table, whatever the source)."""
    return Asset(name=table, uri=f"outoforder://lake/{table}", group=GROUP)


def stage_assets(stage: str) -> tuple[list[Asset], list[Asset]]:
    """A stage's inlets and outlets as the registry declares them (none for a stage it does not know)."""
    from outoforder.errors import ConfigError
    from outoforder.stages import registry

    try:
        s = registry.stage(stage)
    except ConfigError:
        return [], []
    return [table_asset(t) for t in s.reads], [table_asset(t) for t in s.writes]


def judged_and_met(events: Iterable[Any]) -> tuple[bool, str]:
    """Whether asset events release a consumer: some judged the table, and every one of those passed.

    ``events`` are asset events (anything with an ``extra`` mapping), e.g. a run's
    ``triggering_asset_events[asset]``. Events of a stage's writes carry no verdict and count
    for nothing, and so do verdicts over no item (a check run before any period or window of the
    results closed). Returns the answer and why.

    >>> class E:
    ...     def __init__(self, **extra):
    ...         self.extra = extra
    >>> judged_and_met([E(rows=10), E(judged="join_recall", passed=True, items=12, met=12)])
    (True, 'judged by 1 check(s): 12 of 12 met')
    >>> judged_and_met([E(judged="join_recall", passed=False, items=12, met=9)])[0]
    False
    >>> judged_and_met([E(rows=10)])
    (False, 'no check has judged these results yet')
    >>> judged_and_met([E(judged="join_recall", passed=True, items=0, met=0)])[0]
    False
    """
    judged = [
        e.extra
        for e in events
        if isinstance(e.extra, Mapping) and e.extra.get("judged") and int(e.extra.get("items") or 0) > 0
    ]
    if not judged:
        return False, "no check has judged these results yet"
    items = sum(int(x.get("items") or 0) for x in judged)
    met = sum(int(x.get("met") or 0) for x in judged)
    failed = [x for x in judged if not x.get("passed")]
    if failed:
        return False, f"{len(failed)} of {len(judged)} check(s) missed the target: {met} of {items} met"
    return True, f"judged by {len(judged)} check(s): {met} of {items} met"


class QualityEvent(BaseOperator):
    """Put a check's verdict on the asset events of the tables it judged, whatever the check ended as.

    Runs after the check (``all_done``); reads the check task's figures (:data:`FIGURES_KEY`) and
    emits one event per judged table with them as its extra, graded (items, met, share, the worst
    value) and with ``passed``. A check that did not get as far as a verdict (it failed before, or
    never ran) leaves nothing: the task is skipped.
    """

    ui_color = "#eaf7ea"

    def __init__(
        self, *, check: str, tables: Iterable[str], task_id: str = "quality_event", **kwargs: Any
    ) -> None:
        super().__init__(
            task_id=task_id, trigger_rule="all_done", retries=0,
            outlets=[table_asset(t) for t in tables], **kwargs,
        )  # fmt: skip
        self.check = check

    def execute(self, context: Any) -> None:
        """Emit the events, or skip when the check left no verdict."""
        from airflow.sdk.exceptions import AirflowSkipException

        got = context["ti"].xcom_pull(task_ids=self.check, key=FIGURES_KEY) or {}
        run = run_facts(context)
        emitted = []
        for asset in self.outlets:
            figures = got.get(asset.name) if isinstance(got, Mapping) else None
            if not figures or not figures.get("judged"):
                continue
            context["outlet_events"][asset].extra.update({**run, **figures})
            emitted.append(f"{asset.name}: {figures.get('met')} of {figures.get('items')} met")
        if not emitted:
            msg = f"{self.check} left no verdict (it failed before judging, or did not run)"
            raise AirflowSkipException(msg)
        self.log.info("quality on the asset events: %s", "; ".join(emitted))
