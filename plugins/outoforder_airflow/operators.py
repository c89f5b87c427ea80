"""``StageOperator``: one pipeline stage (``python -m outoforder.stages <stage>``) on Spark.

How the stage reaches Spark is the connection's choice (``outoforder_spark`` by default), not the
DAG's:

- a **Spark Connect** connection (``spark_connect``, the default that infra/airflow.sh defines):
  the task runs the stage as a thin client of the shared Spark application, the Spark Connect
  server of infra/spark-connect.sh. No JVM starts: the stage is forked by the warm stage runner
  beside the server (the socket in the connection's extra ``runner``; its imports are done), or,
  without one, started as a process of the Spark venv's Python. A task's fixed cost is then well
  under a second, so the stream DAGs can run every minute. The server's secret comes from the
  connection's password, or from the file its extra ``token_file`` names, and reaches the stage
  in its environment (never its command line);
- a **Spark** connection (``spark``): spark-submit, one Spark application per task, for a
  deployment that wants that (the provider's ``SparkSubmitHook``, with the project's Spark
  settings, Delta's jars and s3a's, resolved when the task runs).

Either way the stage gets the DAG's ``config`` Param as ``OOO_CONFIG`` and, for interval stages,
the run's data interval as ``--start``/``--end``; its progress lines go to the task's log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from airflow.sdk import Asset, BaseHook, BaseOperator

from outoforder.config import REPO_ROOT, load_settings
from outoforder.errors import EXIT_NOTHING_YET, EXIT_QUALITY
from outoforder.io.figures import ENV as FIGURES_ENV
from outoforder_airflow.assets import FIGURES_KEY, run_facts, stage_assets
from outoforder_airflow.links import DataDocsLink, QualityReportLink

log = logging.getLogger(__name__)
APP = str(REPO_ROOT / "pipelines" / "outoforder" / "stages" / "spark_entry.py")
CONN_ID = "outoforder_spark"  # the Spark the stages run on (see the module docstring)
# the arrival time a stream DAG's run covers, and how often they run (the Kafka ingest's too)
STREAM_INTERVAL = timedelta(minutes=1)

RUN_NAME = "{{ dag.dag_id }}__{{ run_id }}"  # names a run's validations and its report page


class StageFailed(RuntimeError):
    """The stage exited with an error (its last lines are in the message; all of them in the log)."""


FAILURE_KEY = "failure"  # the XCom a failed stage task leaves its message in, for RunOutcome


# Airflow 3 runs ``schedule=timedelta(...)`` and cron strings as trigger timetables: a run's data
# interval is empty, at the logical date for scheduled and backfill runs but at the trigger time
# for manual runs, whatever logical date was asked for. A run therefore covers the ``interval``
# before its logical date (the trigger time when a manual run has none), unless a timetable gives
# a real interval.
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


def catch_up_args() -> list[str]:
    """A stream stage's run: one pass from where the job stopped to the run's end.

    A trigger timetable's run times drift (a run waits for a free slot, the scheduler falls
    behind, a run is skipped), so consecutive runs' intervals need not meet: ``--catch-up`` starts
    where the job stopped, whatever the run's interval start says. Not in a backfill's runs: they
    process exactly their intervals, one after the other (the stage task's
    ``max_active_tis_per_dag`` is 1, and Airflow starts the oldest interval first), so a backfill
    over a range processes that range and nothing else; one that would skip arrivals the job has
    not processed yet fails saying from where to backfill.
    """
    return ["{{ '--no-catch-up' if dag_run.run_type == 'backfill' else '--catch-up' }}"]


def judged_args(interval: timedelta) -> list[str]:
    """``--since``/``--until`` of a check that judges what closed in the run's interval.

    With ``--from-judged``: from where the check's runs last judged when that is earlier (run times
    drift apart, and a run that stopped before its verdict is judged by the next one), so nothing
    closes unjudged between runs and a failed verdict is not judged again by every later run. A
    backfill's runs judge exactly their intervals.
    """
    return [
        "--since", interval_start(interval), "--until", INTERVAL_END,
        "{{ '--no-from-judged' if dag_run.run_type == 'backfill' else '--from-judged' }}",
    ]  # fmt: skip


# a task instance in one of these states will not run (again) without a user's action
FINISHED = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})
WAIT_FOR_PREVIOUS = timedelta(seconds=10)  # how often a waiting backfill pass asks again


def previous_pass_pending(context: Any, task_id: str, interval: timedelta) -> None:
    """Reschedule a backfill run's stream pass while the previous interval's pass is still to come.

    A backfill starts its runs side by side, and the stage task's ``max_active_tis_per_dag`` of 1
    lets one pass run at a time; which run's pass gets the slot first is the scheduler's choice of
    what is ready at that moment, not always the oldest. A later interval's pass first would start
    the job's state there and leave the earlier interval nothing to do (or refuse to skip it): the
    pass waits instead, off its slot (``up_for_reschedule``), while the run of the interval before
    its own is running and that run's pass has not ended. A previous run that is queued (a
    backfill with fewer active runs than intervals) or missing is not waited for.
    """
    run = context["dag_run"]
    if run.run_type != "backfill" or run.logical_date is None:
        return
    ti = context["ti"]
    earlier = run.logical_date - interval
    states = ti.get_task_states(dag_id=run.dag_id, task_ids=[task_id], logical_dates=[earlier])
    for run_id, by_task in states.items():
        state = by_task.get(task_id)
        if state in FINISHED or ti.get_dagrun_state(dag_id=run.dag_id, run_id=run_id) != "running":
            continue
        from airflow.sdk.exceptions import AirflowRescheduleException

        log.info("the pass of %s (%s) comes first: asking again in %s", run_id, state, WAIT_FOR_PREVIOUS)
        raise AirflowRescheduleException(datetime.now(UTC) + WAIT_FOR_PREVIOUS)


def _spark_python(env: dict[str, str]) -> str:
    """The Spark venv's Python, where the stages' code and the Spark Connect client live."""
    if env.get("PYSPARK_PYTHON"):
        return env["PYSPARK_PYTHON"]
    if env.get("OOO_SPARK_VENV"):
        return str(Path(env["OOO_SPARK_VENV"]) / "bin" / "python")
    msg = "PYSPARK_PYTHON (or OOO_SPARK_VENV) must name the Spark venv's Python (infra/env.sh sets it)"
    raise StageFailed(msg)


class StageOperator(BaseOperator):
    """Run one stage of the pipeline on Spark (see the module docstring).

    :param stage: the CLI stage, e.g. ``topk-stream``
    :param stage_args: its options (templated)
    :param interval: the DAG's schedule interval: adds the run's ``--start``/``--end``
    :param catch_up: a stream stage: adds :func:`catch_up_args` (with ``interval``)
    :param validation: a validation stage: adds ``--on-violation {{ params.on_violation }}`` and
        names the validation after the DAG run (Data Docs, quality report)
    :param report: the report stage: adds the run's name (its own report page)
    :param conn_id: the Spark connection (Spark Connect, or spark-submit)
    :param config: the stage's settings file, ``OOO_CONFIG`` (templated; empty: the worker's own)
    """

    template_fields: ClassVar[Sequence[str]] = ("stage_args", "config")
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
        catch_up: bool = False,
        conn_id: str = CONN_ID,
        config: str = "{{ params.config }}",
        **kwargs: Any,
    ) -> None:
        if catch_up and interval:
            # the job's state is one chain: its runs' passes one at a time, the oldest first
            kwargs.setdefault("max_active_tis_per_dag", 1)
        inlets, outlets = stage_assets(stage)  # the tables the registry says it reads and writes
        kwargs.setdefault("inlets", inlets)
        kwargs.setdefault("outlets", outlets)
        super().__init__(**kwargs)
        args = [stage, *stage_args, *(interval_args(interval) if interval else [])]
        if catch_up and interval:
            args += catch_up_args()
        if validation:
            args += ["--on-violation", "{{ params.on_violation }}", "--run-name", RUN_NAME]
        if report:
            args += ["--run-name", RUN_NAME]
        self.stage = stage
        self.stage_args = args
        self.chained_every = interval if catch_up else None  # a backfill's passes wait for the previous one
        self.conn_id = conn_id
        self.config = config
        self._process: subprocess.Popen[str] | None = None
        self._forked: int | None = None  # the runner's child running the stage
        self._hook: Any = None

    def execute(self, context: Any) -> None:
        """Run the stage as the connection says: a Spark Connect client, or spark-submit.

        A failure's message is also left in the task's XCom (:data:`FAILURE_KEY`), where the run's
        :class:`RunOutcome` reads it: the run fails with the stage's or check's own words. What the
        stage recorded per table (:mod:`outoforder.io.figures`) goes to the XCom
        :data:`~outoforder_airflow.assets.FIGURES_KEY` whatever the end (a failed check's verdict
        too), and on success onto its outlets' asset events, with the run's lag.
        """
        from airflow.sdk.exceptions import AirflowSkipException

        from outoforder.io import figures

        if self.chained_every is not None:
            previous_pass_pending(context, self.task_id, self.chained_every)
        with tempfile.TemporaryDirectory(prefix="outoforder-figures-") as tmp:
            path = Path(tmp) / "figures.json"
            try:
                self._execute(path)
            except AirflowSkipException:
                raise
            except Exception as e:
                with contextlib.suppress(Exception):  # the failure itself matters more than its notes
                    context["ti"].xcom_push(key=FAILURE_KEY, value=str(e)[-2000:])
                    context["ti"].xcom_push(key=FIGURES_KEY, value=figures.read(path))
                raise
            recorded = figures.read(path)
        if recorded:
            context["ti"].xcom_push(key=FIGURES_KEY, value=recorded)
        run = run_facts(context)
        end = context.get("data_interval_end")
        if end is not None:
            run["lag_s"] = round((datetime.now(UTC) - end).total_seconds(), 1)
        for asset in self.outlets:
            if isinstance(asset, Asset):
                context["outlet_events"][asset].extra.update({**run, **recorded.get(asset.name, {})})

    def _execute(self, figures_file: Path) -> None:
        conn = BaseHook.get_connection(self.conn_id)
        env = dict(os.environ)
        env[FIGURES_ENV] = str(figures_file)
        if self.config:
            env["OOO_CONFIG"] = self.config
        if conn.conn_type == "spark_connect":
            self._run_client(conn, env)
        elif conn.conn_type == "spark":
            self._submit(env)
        else:
            msg = (
                f"connection {self.conn_id} is of type {conn.conn_type!r}: a stage runs on a "
                "'spark_connect' connection (the shared server) or a 'spark' one (spark-submit)"
            )
            raise StageFailed(msg)

    def _run_client(self, conn: Any, env: dict[str, str]) -> None:
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        env["OOO_SPARK_REMOTE"] = SparkConnectHook(self.conn_id).get_connection_url()
        token_file = (conn.extra_dejson or {}).get("token_file")
        if token_file and not conn.password:
            env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = Path(token_file).read_text().strip()
        shown = env["OOO_SPARK_REMOTE"].split(";")[0]
        last: deque[str] = deque(maxlen=20)

        def out(line: str) -> None:
            last.append(line)
            self.log.info("%s", line)

        runner = (conn.extra_dejson or {}).get("runner")
        code: int | None = None
        if runner and Path(runner).is_socket():
            from outoforder.stages.runner import RunnerUnavailable, run

            self.log.info("stage %s as a client of %s, forked by the stage runner", self.stage, shown)
            try:
                code = run(runner, list(self.stage_args), env, out, on_pid=self._started)
            except RunnerUnavailable as e:  # its supervisor restarts it; this stage need not wait
                self.log.warning("%s: the stage runs as a process of its own", e)
        if code is None:
            self.log.info("stage %s as a client of %s", self.stage, shown)
            self._process = subprocess.Popen(
                [_spark_python(env), "-m", "outoforder.stages", *self.stage_args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            assert self._process.stdout is not None
            for line in self._process.stdout:
                out(line.rstrip("\n"))
            code = self._process.wait()
        if code == EXIT_NOTHING_YET:  # its source has no input yet: skipped, and so is what needs it
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(" | ".join(x for x in last if x.strip())[-2000:])
        if code != 0:
            msg = (
                f"stage {self.stage} exited with status {code}: "
                + " | ".join(x for x in last if x.strip())[-2000:]
            )
            if code == EXIT_QUALITY:  # a verdict on what is written: a retry would repeat it
                from airflow.sdk.exceptions import AirflowFailException

                raise AirflowFailException(msg)
            raise StageFailed(msg)

    def _submit(self, env: dict[str, str]) -> None:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        settings = load_settings(env.get("OOO_CONFIG") or None, env=env)
        self._hook = SparkSubmitHook(
            conf=settings.spark_conf(),  # resolved here: a DAG parses where the jar cache is not set up
            conn_id=self.conn_id,
            name=f"outoforder-{self.stage}",
            application_args=list(self.stage_args),
            # an application of its own: not a client of a server this process knows of
            # (the driver runs here, in client mode: its figures file is this task's)
            env_vars={
                "OOO_SPARK_REMOTE": "",
                FIGURES_ENV: env[FIGURES_ENV],
                **({"OOO_CONFIG": self.config} if self.config else {}),
            },
            verbose=False,
        )
        self._hook.submit(APP)

    def _started(self, pid: int) -> None:
        self._forked = pid

    def on_kill(self) -> None:
        """Stop the stage: a client ends its jobs on the shared server when told (SIGTERM)."""
        if self._forked is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._forked, signal.SIGTERM)
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        if self._hook is not None:
            self._hook.on_kill()


class RunOutcome(BaseOperator):
    """A run's last task: it fails the run when any of its tasks failed, quoting their messages.

    Airflow derives a run's state from its leaf tasks, and a DAG's leaf is often its report, which
    runs whatever happened before it (``all_done``): without this task a run whose stage or check
    failed would be shown as a success. It runs only when an upstream task failed
    (``one_failed``); otherwise it is skipped, and a skipped leaf leaves the run successful. A
    check run with ``on_violation = warn`` does not fail, so neither does its run.
    Every other task of the DAG is upstream of it (:func:`close_run` wires that).
    """

    ui_color = "#fbe8e8"

    def __init__(self, *, task_id: str = "run_outcome", **kwargs: Any) -> None:
        super().__init__(task_id=task_id, trigger_rule="one_failed", retries=0, **kwargs)

    def execute(self, context: Any) -> None:
        """Fail, naming every failed upstream task and its message."""
        from airflow.sdk.exceptions import AirflowFailException

        ti = context["ti"]
        notes = []
        for task_id in sorted(self.upstream_task_ids):
            note = ti.xcom_pull(task_ids=task_id, key=FAILURE_KEY)
            if note:
                notes.append(f"{task_id}: {note}")
        detail = "\n".join(notes) or "see the failed tasks' logs"
        msg = f"the run failed: a stage or check of it failed\n{detail}"
        self.log.error("%s", msg)
        raise AirflowFailException(msg)


def close_run() -> RunOutcome:
    """Add :class:`RunOutcome` downstream of every task of the DAG being defined (call it last)."""
    outcome = RunOutcome()  # in the DAG's context: it joins that DAG
    for task in outcome.dag.tasks:
        if task is not outcome:
            task >> outcome
    return outcome
