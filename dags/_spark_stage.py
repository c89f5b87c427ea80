"""What several DAGs share: the Params that define a job, and the stage options they become.

Not a DAG (Airflow skips files without a DAG). Standard library and Airflow only at parse time:
the Params and the templated stage arguments are generated from the job declarations
(``outoforder.stages.*.spec``, standard library only), so a DAG Param and its CLI flag cannot
drift apart (tests/airflow/test_dag_params.py checks every DAG against the CLI's parser).
How a stage is submitted to Spark is the plugin's ``StageOperator`` (plugins/outoforder_airflow).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum

from outoforder.stages import spec
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.theta.spec import DEMO_JOB as THETA_DEMO
from outoforder.stages.theta.spec import ThetaJob
from outoforder.stages.topk.spec import DEMO_JOB as TOPK_DEMO
from outoforder.stages.topk.spec import TopKJob


def params(declared: dict[str, tuple[Any, dict[str, Any]]], *tables: str) -> dict[str, Any]:
    """``declared`` Params (name -> (default, JSON-schema keywords)) with the config's ``[dags]`` defaults.

    ``[dags]``'s top-level keys apply to every DAG that has the Param, the ``tables`` (a job's, then
    the DAG's own) to this one: a key there that is not one of its Params fails the DAG's import,
    naming it. What scheduled runs use and what a manual run's form starts from.
    """
    from airflow.sdk import Param

    from outoforder.config import load_settings
    from outoforder.errors import ConfigError

    settings = load_settings()
    own: dict[str, Any] = {}
    for table in tables:
        own |= settings.dags.get(table, {})
    unknown = sorted(set(own) - set(declared))
    if unknown:
        msg = f"[dags.{'/'.join(tables)}] sets {unknown}: not Params of these DAGs ({', '.join(declared)})"
        raise ConfigError(msg)
    given = {k: v for k, v in settings.dag_param_defaults(*tables).items() if k in declared}
    return {name: Param(given.get(name, default), **kw) for name, (default, kw) in declared.items()}


def _params(
    job: type[spec.Job], table: str, defaults: spec.Job | None = None, extra: tuple[spec.Setting, ...] = ()
) -> dict[str, Any]:
    return params(spec.dag_params(job, defaults, extra=extra), table)


def join_params() -> dict[str, Any]:
    """The Params that define a stream-join job (the same in every join DAG, so the job ids agree)."""
    return _params(JoinJob, "join")


JOIN_ARGS = spec.stage_args(JoinJob)


def agg_params() -> dict[str, Any]:
    """The Params that define an aggregate job (shared by aggregate_stream and late_repair)."""
    return _params(AggJob, "aggregate")


AGG_ARGS = spec.stage_args(AggJob)

# Emitted when the late-tuple ledger of an aggregate job meets HPM's Γ rule; late_repair runs on it.
LEDGER_DUE_URI = "outoforder://silver/agg_ledger/repair-due"


def theta_params() -> dict[str, Any]:
    """The Params of a θ-join backfill job: the main job's query by default, and the check's sample."""
    return _params(ThetaJob, "theta", THETA_DEMO, extra=(spec.SAMPLE,))


THETA_ARGS = spec.stage_args(ThetaJob)


def topk_params() -> dict[str, Any]:
    """The Params of a continuous top-k job; the defaults fit the demo's 20 s replay.

    The seed's query is 60 s windows sliding by 5 s with n = 30 queries per decision: on a 20 s
    replay that would close no window, so the DAG defaults to the main job's scaled query (the CLI
    keeps the seed's).
    """
    return _params(TopKJob, "topk", TOPK_DEMO)


TOPK_ARGS = spec.stage_args(TopKJob)


# The @dag arguments shared by the stream DAGs that process one arrival-time interval per run: the
# operator's state is carried in Delta from interval to interval, so one run at a time and no
# scheduler catch-up (the stage itself starts where the job stopped). Replay clocks start near the
# epoch (the DEBS 2013 game clock): backfills over them must lie after the start date.
INTERVAL_DAG: dict[str, Any] = {
    "start_date": pendulum.datetime(1970, 1, 1, tz="UTC"),
    "catchup": False,
    "max_active_runs": 1,
    "default_args": {
        "retries": 2,
        "retry_delay": timedelta(seconds=30),
        "owner": "outoforder",
        # no depends_on_past: runs go one at a time (max_active_runs), a run's stage catches up from
        # where the job stopped, and a failed check must not hold up the next minute's results
    },
}


def quality_report(section: str, interval: timedelta) -> Any:
    """A stream DAG's closing task: the run's page of the quality report with the DAG's own section.

    It runs whatever came before it ended as (``all_done``): a failed check gets its page too.
    """
    from outoforder_airflow.operators import StageOperator

    return StageOperator(
        task_id="quality_report",
        stage="report",
        stage_args=["--sections", section],
        report=True,
        interval=interval,
        trigger_rule="all_done",
    )
