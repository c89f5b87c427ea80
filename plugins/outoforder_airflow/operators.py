"""``StageOperator``: one pipeline stage (``python -m outoforder.stages <stage>``) on Spark.

It is the Spark provider's ``SparkSubmitOperator`` with the project's settings filled in: the
stage entry point, the Spark configuration of ``include/config/outoforder.toml`` (or the file in
the DAG's ``config`` Param), Delta's jars from the Maven cache (resolved when the task runs, so a
DAG parses on machines without the cache), the Spark connection (``spark_default``: ``local[2]``,
or a cluster) and, for interval stages, the run's data interval as ``--start``/``--end``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from outoforder.config import REPO_ROOT, load_settings
from outoforder_airflow.links import DataDocsLink, QualityReportLink

APP = str(REPO_ROOT / "pipelines" / "outoforder" / "stages" / "spark_entry.py")

RUN_NAME = "{{ dag.dag_id }}__{{ run_id }}"  # names a run's validations and its report page


# Airflow 3 runs ``schedule=timedelta(...)`` as a trigger timetable: a run's data interval is empty,
# at the logical date for scheduled and backfill runs but at the trigger time for manual runs,
# whatever logical date was asked for. A run therefore covers the ``interval`` before its logical
# date (the trigger time when a manual run has none), unless a timetable gives a real interval.
INTERVAL_END = (
    "{{ data_interval_end if data_interval_start < data_interval_end "
    "else (logical_date or data_interval_end) }}"
)


def interval_start(interval: timedelta) -> str:
    """The start of the arrival-time interval a run covers (see :data:`INTERVAL_END`)."""
    return (
        "{{ data_interval_start if data_interval_start < data_interval_end "
        "else (logical_date or data_interval_end) "
        f"- macros.timedelta(seconds={interval.total_seconds():g}) }}}}"
    )


def interval_args(interval: timedelta) -> list[str]:
    """``--start``/``--end`` of the arrival-time interval a run covers (see :data:`INTERVAL_END`)."""
    return ["--start", interval_start(interval), "--end", INTERVAL_END]


def judged_args(interval: timedelta) -> list[str]:
    """``--since``/``--until`` of a check that judges what closed in the run's interval."""
    return ["--since", interval_start(interval), "--until", INTERVAL_END]


class StageOperator(SparkSubmitOperator):
    """Submit one stage of the pipeline to Spark.

    :param stage: the CLI stage, e.g. ``topk-stream``
    :param stage_args: its options (templated)
    :param interval: the DAG's schedule interval: adds the run's ``--start``/``--end``
    :param validation: a validation stage: adds ``--on-violation {{ params.on_violation }}`` and
        names the validation after the DAG run (Data Docs, quality report)
    :param report: the report stage: adds the run's name (its own report page)
    """

    operator_extra_links = (QualityReportLink(), DataDocsLink())
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        stage: str,
        stage_args: Sequence[str] = (),
        interval: timedelta | None = None,
        validation: bool = False,
        report: bool = False,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        args = [stage, *stage_args, *(interval_args(interval) if interval else [])]
        if validation:
            args += ["--on-violation", "{{ params.on_violation }}", "--run-name", RUN_NAME]
        if report:
            args += ["--run-name", RUN_NAME]
        kwargs.setdefault("name", f"outoforder-{stage}")
        kwargs.setdefault("verbose", False)
        super().__init__(
            application=APP,
            application_args=args,
            conn_id=conn_id,
            conf=load_settings().spark_conf(with_jars=False),
            env_vars={"OOO_CONFIG": "{{ params.config }}"},
            **kwargs,
        )
        self.stage = stage

    def execute(self, context: Any) -> None:
        """Resolve the jars (Delta's, and s3a's for a remote lake), then submit."""
        # resolved here, not at parse: a DAG file must parse where the jar cache is not set up
        self.conf = {**(self.conf or {}), **load_settings().spark_conf()}
        if not (self.env_vars or {}).get("OOO_CONFIG"):
            # an empty config Param: the stage reads the worker's own OOO_CONFIG, as the Spark
            # settings above do, rather than none at all
            self.env_vars = {k: v for k, v in (self.env_vars or {}).items() if k != "OOO_CONFIG"}
        super().execute(context)
