"""What several DAGs share: the Params that define a job, and the stage options they become.

Not a DAG (Airflow skips files without a DAG). Standard library and Airflow only at parse time:
the Params and the templated stage arguments are generated from the operators' declarations
(``outoforder.stages.registry``, standard library only), so a DAG Param and its CLI flag cannot
drift apart (tests/airflow/test_dag_params.py checks every DAG against the CLI's parser).
How a stage is submitted to Spark is the plugin's ``StageOperator`` (plugins/outoforder_airflow).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum

from outoforder.stages import registry, spec


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
        renamed = [
            r for op in registry.operators() if op.job for k in unknown if (r := op.job.renamed_option(k))
        ]
        hint = f" ({'; '.join(dict.fromkeys(renamed))})" if renamed else ""
        table = "/".join(tables)
        msg = f"[dags.{table}] sets {unknown}: not Params of these DAGs ({', '.join(declared)}){hint}"
        raise ConfigError(msg)
    given = {k: v for k, v in settings.dag_param_defaults(*tables).items() if k in declared}
    return {name: Param(given.get(name, default), **kw) for name, (default, kw) in declared.items()}


def _job(operator: str) -> tuple[registry.Operator, type[spec.Job]]:
    op = registry.operator(operator)
    if op.job is None:
        msg = f"operator {operator} has no job"
        raise ValueError(msg)
    return op, op.job


def job_params(operator: str) -> dict[str, Any]:
    """The Params that define an operator's job (the same in every DAG of the job, so the job ids agree).

    The job's declared defaults, then the config's ``[dags]`` and ``[dags.<operator>]`` tables.
    """
    op, job = _job(operator)
    return params(spec.dag_params(job, extra=op.params), op.name)


def job_args(operator: str) -> list[str]:
    """The templated stage options that pass a DAG's job Params: ``--window-s {{ params.window_s }}``."""
    return spec.stage_args(_job(operator)[1])


# Emitted when the late-tuple ledger of an aggregate job meets HPM's Γ rule; late_repair runs on it.
LEDGER_DUE_URI = "outoforder://silver/agg_ledger/repair-due"


def every(interval: timedelta) -> str | timedelta:
    """A schedule firing every ``interval`` on the clock's multiples of it, where cron can say so.

    A cron expression for a whole number of minutes that divides the hour; otherwise every
    ``interval`` from when the DAG was unpaused.

    Why aligned: the stream DAGs' runs end their intervals where the ingest's end theirs, so a
    stage's interval is covered by the ingest run of the same minute; with a phase of their own
    (each DAG's from its unpause time) a stage whose interval ends after the ingest listed the
    topic waits a whole minute for the next batch.

    >>> every(timedelta(minutes=1)), every(timedelta(minutes=5)), every(timedelta(seconds=30))
    ('* * * * *', '*/5 * * * *', datetime.timedelta(seconds=30))
    """
    minutes, rest = divmod(int(interval.total_seconds()), 60)
    if rest or not minutes or 60 % minutes or interval.microseconds:
        return interval
    return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"


def default_args(retries: int = 2, retry_delay: timedelta = timedelta(seconds=30)) -> dict[str, Any]:
    """Every DAG's task defaults: the owner, and the retries its work can afford."""
    return {"retries": retries, "retry_delay": retry_delay, "owner": "outoforder"}


# The @dag arguments shared by the stream DAGs that process one arrival-time interval per run: the
# operator's state is carried in Delta from interval to interval, so one run at a time and no
# scheduler catch-up (the stage itself starts where the job stopped). Replay clocks start near the
# epoch (the DEBS 2013 game clock): backfills over them must lie after the start date.
INTERVAL_DAG: dict[str, Any] = {
    "start_date": pendulum.datetime(1970, 1, 1, tz="UTC"),
    "catchup": False,
    "max_active_runs": 1,
    # no depends_on_past: runs go one at a time (max_active_runs), a run's stage catches up from
    # where the job stopped, and a failed check must not hold up the next minute's results
    "default_args": default_args(),
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


def interval_dag(operator: str, interval: timedelta | None = None, doc: str | None = None) -> Any:
    """An operator's stream DAG: its stream stage over one arrival interval per run, its check, the report.

    The shape every stream operator shares (``[dags.<operator>]`` sets its Params' defaults); the
    operator's folder names the two stages (:class:`outoforder.stages.registry.Operator`).
    ``interval``: the plugin's ``STREAM_INTERVAL`` unless given.
    """
    from airflow.sdk import dag
    from outoforder_airflow.assets import QualityEvent
    from outoforder_airflow.operators import STREAM_INTERVAL, StageOperator, close_run, judged_args

    interval = interval or STREAM_INTERVAL
    op = registry.operator(operator)
    if op.stream is None or op.check is None:
        msg = f"operator {operator} declares no stream and check stages"
        raise ValueError(msg)
    args = job_args(operator)
    stream, check = op.stage(op.stream), op.stage(op.check)

    @dag(
        dag_id=f"{op.name}_stream",
        schedule=every(interval),
        tags=["outoforder", op.name, "gold"],
        doc_md=doc
        or f"### {op.summary}\n\n1. **{stream.name}**: {stream.help}\n2. **{check.name}**: {check.help}",
        params=job_params(operator),
        **INTERVAL_DAG,
    )
    def build() -> None:
        run = StageOperator(
            task_id=f"{op.name}_interval",
            stage=stream.name,
            stage_args=args,
            interval=interval,
            catch_up=True,
        )
        judge = StageOperator(
            task_id=check.name.replace("-", "_"),
            stage=check.name,
            stage_args=[*args, *judged_args(interval)],
            validation=True,
        )
        # the check's verdict on the results' asset events, whatever it ended as
        (
            run
            >> judge
            >> [QualityEvent(check=judge.task_id, tables=check.judges), quality_report(op.name, interval)]
        )
        close_run()

    return build()
