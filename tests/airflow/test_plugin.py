"""The Airflow plugin: registered by Airflow itself, its operator, its links and its web app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.airflow.conftest import REPO

pytestmark = pytest.mark.airflow


def test_airflow_loads_the_plugin_with_its_links_app_and_views(airflow_env):
    exe = Path(sys.executable).parent / "airflow"
    run = subprocess.run(
        [str(exe), "plugins", "--output", "json"],
        env=airflow_env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    plugins = {p["name"]: p for p in json.loads(run.stdout[run.stdout.index("[") :])}
    mine = plugins["outoforder"]
    text = json.dumps(mine)
    assert "QualityReportLink" in text and "DataDocsLink" in text
    assert "/outoforder" in text  # the web app's prefix
    assert "Quality report" in text and "Data Docs" in text


@pytest.fixture
def plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "plugins"))


def test_stage_operator_fills_in_the_stage_interval_and_validation(plugin_path, airflow_env, monkeypatch):
    for k in ("OOO_LAKE_ROOT", "PATH"):
        monkeypatch.setenv(k, airflow_env[k])
    from outoforder_airflow.operators import StageOperator

    op = StageOperator(
        task_id="v",
        stage="validate-topk",
        stage_args=["--k", "5"],
        interval=timedelta(minutes=1),
        validation=True,
    )
    args = op.stage_args
    assert args[:3] == ["validate-topk", "--k", "5"]
    assert args[args.index("--on-violation") + 1] == "{{ params.on_violation }}"
    assert args[args.index("--run-name") + 1] == "{{ dag.dag_id }}__{{ run_id }}"
    assert "--start" in args and "--end" in args
    assert (op.conn_id, op.config) == ("outoforder_spark", "{{ params.config }}")
    assert {type(link).__name__ for link in op.operator_extra_links} == {"QualityReportLink", "DataDocsLink"}
    plain = StageOperator(task_id="s", stage="topk-stream")
    assert plain.stage_args == ["topk-stream"]
    # a stream stage catches up, except in a backfill's runs (exactly their intervals, one at a time)
    stream = StageOperator(task_id="t", stage="topk-stream", interval=timedelta(minutes=1), catch_up=True)
    catch_up = stream.stage_args[-1]
    assert "dag_run.run_type == 'backfill'" in catch_up and "--catch-up" in catch_up
    assert stream.max_active_tis_per_dag == 1 and plain.max_active_tis_per_dag is None


def test_links_point_at_the_run_report_and_data_docs(plugin_path):
    from outoforder_airflow.links import DataDocsLink, QualityReportLink

    class Key:
        dag_id, run_id = "topk_stream", "manual__2026-01-01T00:00:00+00:00"

    assert QualityReportLink().get_link(None, ti_key=Key()) == (
        "/outoforder/run/topk_stream/manual__2026-01-01T00%3A00%3A00%2B00%3A00"
    )
    assert DataDocsLink().get_link(None, ti_key=Key()) == "/outoforder/docs/index.html"


def test_web_app_serves_reports_docs_and_redirects_runs(plugin_path, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    reports = tmp_path / "reports"
    monkeypatch.setenv("OOO_REPORTS_DIR", str(reports))
    monkeypatch.delenv("OOO_DOCS_DIR", raising=False)
    (reports / "quality" / "runs").mkdir(parents=True)
    (reports / "quality" / "index.html").write_text("<h1>cumulative</h1>")
    (reports / "quality" / "runs" / "topk_stream__manual__2026-01-01T00_00_00_00_00.html").write_text(
        "<h1>run</h1>"
    )
    (reports / "data_docs").mkdir()
    (reports / "data_docs" / "index.html").write_text("<h1>docs</h1>")
    from outoforder_airflow.web import create_app

    client = TestClient(
        create_app(_resolve, _login, _may_read), cookies={"_token": "good"}
    )  # the UI's cookie
    assert client.get("/reports/quality/index.html").text == "<h1>cumulative</h1>"
    assert client.get("/docs/index.html").text == "<h1>docs</h1>"
    run = client.get("/run/topk_stream/manual__2026-01-01T00:00:00+00:00", follow_redirects=False)
    assert (
        run.headers["location"]
        == "/outoforder/reports/quality/runs/topk_stream__manual__2026-01-01T00_00_00_00_00.html"
    )
    other = client.get("/run/topk_stream/scheduled__1970", follow_redirects=False)
    assert other.headers["location"] == "/outoforder/reports/quality/index.html"  # no page of its own yet
    # a file beside the reports folder, and requests that climb to it. The HTTP client resolves a
    # literal "../" before sending it (so that form never reaches the app); percent-encoded dots
    # and slashes are sent as they are and decoded by the server, so they reach the folder's guard
    (tmp_path / "beside.txt").write_text("not a report")
    for path in (
        "/reports/../beside.txt",
        "/reports/%2e%2e/beside.txt",
        "/reports/quality/%2e%2e/%2e%2e/beside.txt",
        "/reports/%2E%2E%2Fbeside.txt",
        "/docs/%2e%2e/%2e%2e/beside.txt",
        "/reports/..%5cbeside.txt",
    ):
        got = client.get(path)
        assert got.status_code == 404, path
        assert "not a report" not in got.text, path
    sent = client.build_request("GET", "/reports/%2e%2e/beside.txt")
    assert "%2e%2e" in sent.url.raw_path.decode()  # the encoded form is what the server receives


async def _resolve(token):
    """Airflow's resolver in miniature: a user for the one good token, its HTTP errors otherwise."""
    from fastapi import HTTPException

    if token != "good":
        raise HTTPException(
            401 if token is None else 403, "Not authenticated" if token is None else "Invalid"
        )
    return "admin"


def _may_read(user, dag_id):
    """Airflow's DAG permissions in miniature: the admin reads every DAG."""
    return user == "admin"


def _login(next_url):
    return f"/auth/login?next={next_url}"


def test_web_app_serves_nothing_without_a_logged_in_user(plugin_path, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    reports = tmp_path / "reports"
    monkeypatch.setenv("OOO_REPORTS_DIR", str(reports))
    monkeypatch.delenv("OOO_DOCS_DIR", raising=False)
    (reports / "quality").mkdir(parents=True)
    (reports / "quality" / "index.html").write_text("<h1>cumulative</h1>")
    from outoforder_airflow.web import create_app

    client = TestClient(create_app(_resolve, _login, _may_read))
    page = "/reports/quality/index.html"
    # a browser goes to the login page and comes back; a script gets 401; a bad token, 403
    browser = client.get(page, headers={"Accept": "text/html"}, follow_redirects=False)
    assert browser.status_code == 307
    assert browser.headers["location"] == "/auth/login?next=http://testserver/reports/quality/index.html"
    for path in (page, "/docs/index.html", "/run/topk_stream/manual__1", "/"):
        assert client.get(path, follow_redirects=False).status_code == 401, path
    assert client.get(page, headers={"Authorization": "Bearer forged"}).status_code == 403
    forged = TestClient(create_app(_resolve, _login, _may_read), cookies={"_token": "forged"})
    assert forged.get(page).status_code == 403
    # the REST API's token works as a header, for scripts
    assert client.get(page, headers={"Authorization": "Bearer good"}).text == "<h1>cumulative</h1>"


@pytest.mark.parametrize(("status", "outcome"), [(3, "fail"), (2, "retry"), (5, "skip")])
def test_stage_operator_fails_for_good_on_a_quality_verdict_and_retries_an_error(
    plugin_path, airflow_env, monkeypatch, tmp_path, status, outcome
):
    """Exit status 3 (a failed check) is final: a retry would judge the same rows again. Status 5
    (a scheduled run whose source has no input yet) skips the task, and what needs it."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
    from outoforder_airflow.operators import StageFailed, StageOperator

    stage = tmp_path / "stage"
    stage.write_text(f"#!/bin/sh\necho 'error: the stage says why'\nexit {status}\n")
    stage.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(stage))
    monkeypatch.setattr(SparkConnectHook, "get_connection_url", lambda self: "sc://127.0.0.1:1")

    class Conn:
        def __init__(self) -> None:
            self.extra_dejson: dict[str, str] = {}  # no stage runner: the stage runs as a process of its own
            self.password = None

    op = StageOperator(task_id="v", stage="validate-topk")
    raised = {"fail": AirflowFailException, "retry": StageFailed, "skip": AirflowSkipException}[outcome]
    with pytest.raises(raised) as failed:
        op._run_client(Conn(), dict(os.environ))
    assert type(failed.value) is raised
    assert "the stage says why" in str(failed.value)
    if outcome != "skip":
        assert f"exited with status {status}" in str(failed.value)


def test_run_outcome_fails_the_run_quoting_each_failed_task(plugin_path, airflow_env, monkeypatch):
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import AirflowFailException
    from outoforder_airflow.operators import FAILURE_KEY, StageOperator, close_run

    with DAG("d", schedule=None) as dag:
        stage = StageOperator(task_id="stage", stage="topk-stream")
        check = StageOperator(task_id="check", stage="validate-topk", validation=True)
        stage >> check
        outcome = close_run()
    assert outcome.upstream_task_ids == {"stage", "check"} and outcome.trigger_rule == "one_failed"
    assert dag.leaves == [outcome]

    class Ti:  # the XComs a failed check left (StageOperator.execute pushes them)
        def xcom_pull(self, task_ids: str, key: str) -> str | None:
            assert key == FAILURE_KEY
            return {"check": "stage validate-topk exited with status 3: accuracy 0.81 < 0.9"}.get(task_ids)

    with pytest.raises(AirflowFailException) as failed:
        outcome.execute({"ti": Ti()})
    assert "check: stage validate-topk exited with status 3: accuracy 0.81 < 0.9" in str(failed.value)
    assert "stage:" not in str(failed.value)  # only the tasks that failed are named


@pytest.mark.parametrize(
    ("run_type", "earlier_pass", "earlier_run", "waits"),
    [
        ("backfill", "scheduled", "running", True),  # the earlier interval's pass not started yet
        ("backfill", "up_for_retry", "running", True),
        ("backfill", "success", "running", False),
        ("backfill", "failed", "running", False),  # its own pass then says from where to backfill
        ("backfill", None, "queued", False),  # not started (fewer active runs than intervals)
        ("scheduled", "running", "running", False),  # scheduled runs catch up instead
    ],
)
def test_a_backfills_pass_waits_for_the_previous_intervals_pass(
    plugin_path, airflow_env, run_type, earlier_pass, earlier_run, waits
):
    from datetime import UTC, datetime

    from airflow.sdk.exceptions import AirflowRescheduleException
    from outoforder_airflow.operators import previous_pass_pending

    logical = datetime(1970, 1, 1, 3, 1, tzinfo=UTC)
    asked: list[object] = []

    class Ti:
        def get_task_states(self, dag_id, task_ids, logical_dates):
            asked.append(logical_dates)
            return {"backfill__03:00": {task_ids[0]: earlier_pass}}

        def get_dagrun_state(self, dag_id, run_id):
            assert run_id == "backfill__03:00"
            return earlier_run

    run = type("Run", (), {"dag_id": "join_stream", "logical_date": logical, "run_type": run_type})
    context = {"dag_run": run(), "ti": Ti()}
    if waits:
        with pytest.raises(AirflowRescheduleException):
            previous_pass_pending(context, "join_interval", timedelta(minutes=1))
    else:
        previous_pass_pending(context, "join_interval", timedelta(minutes=1))
    if run_type == "backfill":
        assert asked == [[logical - timedelta(minutes=1)]]  # the interval just before its own


def test_web_app_follows_each_dags_read_permission(plugin_path, tmp_path, monkeypatch):
    """A user who may read one DAG reads its runs' pages, not another DAG's, nor the pages of every DAG."""
    from fastapi.testclient import TestClient

    reports = tmp_path / "reports"
    monkeypatch.setenv("OOO_REPORTS_DIR", str(reports))
    monkeypatch.delenv("OOO_DOCS_DIR", raising=False)
    runs = reports / "quality" / "runs"
    runs.mkdir(parents=True)
    (reports / "quality" / "index.html").write_text("<h1>every DAG</h1>")
    (runs / "topk_stream__manual__1.html").write_text("<h1>topk run</h1>")
    (runs / "join_stream__scheduled__1.html").write_text("<h1>join run</h1>")
    (reports / "data_docs").mkdir()
    (reports / "data_docs" / "index.html").write_text("<h1>docs</h1>")
    from outoforder_airflow.web import CONTENT_SECURITY_POLICY, create_app

    asked = []

    async def resolve(token):
        return token  # the token names the user here

    def may_read(user, dag_id):
        asked.append((user, dag_id))
        return user == "admin" or (user == "topk-team" and dag_id == "topk_stream")

    def client(user):
        return TestClient(create_app(resolve, _login, may_read), cookies={"_token": user})

    team, admin = client("topk-team"), client("admin")
    assert team.get("/reports/quality/runs/topk_stream__manual__1.html").text == "<h1>topk run</h1>"
    for path in (
        "/reports/quality/runs/join_stream__scheduled__1.html",  # another DAG's run
        "/run/join_stream/scheduled__1",
        "/reports/quality/index.html",  # every DAG's checks
        "/docs/index.html",
        "/",
        # a run page's name that climbs back to the cumulative page
        "/reports/quality/runs/topk_stream__manual__1.html/../../index.html",
        "/reports/quality/runs/topk_stream__manual__x/%2e%2e/%2e%2e/index.html",
    ):
        got = team.get(path, follow_redirects=False)
        assert got.status_code == 403, path
        assert "run</h1>" not in got.text and "every DAG</h1>" not in got.text, path
    assert ("topk-team", "join_stream") in asked and ("topk-team", None) in asked
    assert team.get("/run/topk_stream/manual__1", follow_redirects=False).status_code == 307
    # the admin reads everything, and every page says where its scripts may come from
    for path in (
        "/reports/quality/index.html",
        "/docs/index.html",
        "/reports/quality/runs/join_stream__scheduled__1.html",
    ):
        got = admin.get(path)
        assert got.status_code == 200, path
        assert got.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY and "http" not in CONTENT_SECURITY_POLICY


def test_a_stages_figures_reach_its_asset_events_and_a_checks_verdict_the_results(
    plugin_path, airflow_env, monkeypatch, tmp_path
):
    """What a stage records per table goes on its outlets' events; a check's verdict, passed or not,
    reaches the judged table's event through QualityEvent, and gates a consumer."""
    from collections import defaultdict
    from datetime import UTC, datetime

    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import BaseHook
    from outoforder_airflow.assets import FIGURES_KEY, QualityEvent, judged_and_met, table_asset
    from outoforder_airflow.operators import StageOperator

    def stage_writing(figures: dict, status: int) -> None:
        script = tmp_path / f"stage{status}"
        script.write_text(f"#!/bin/sh\necho '{json.dumps(figures)}' > \"$OOO_FIGURES_FILE\"\nexit {status}\n")
        script.chmod(0o755)
        monkeypatch.setenv("PYSPARK_PYTHON", str(script))

    class Conn:
        conn_type, extra_dejson, password = "spark_connect", {}, None

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(lambda cls, conn_id: Conn()))
    monkeypatch.setattr(SparkConnectHook, "get_connection_url", lambda self: "sc://127.0.0.1:1")

    class Event:
        def __init__(self) -> None:
            self.extra: dict = {}

    class Ti:
        def __init__(self, pulled: dict | None = None) -> None:
            self.pushed: dict = {}
            self.pulled = pulled or {}

        def xcom_push(self, key: str, value: object) -> None:
            self.pushed[key] = value

        def xcom_pull(self, task_ids: str, key: str) -> object:
            return self.pulled.get((task_ids, key))

    def context(ti: Ti) -> dict:
        end = datetime(2026, 1, 1, tzinfo=UTC)  # the run ends after its interval: a lag > 0
        return {"ti": ti, "run_id": "r1", "data_interval_end": end, "outlet_events": defaultdict(Event)}

    # a stream stage: its rows and span on the events of the tables it writes, with the run's lag
    stage_writing({"gold/join_results": {"rows": 42, "start_us": 1, "end_us": 2}}, 0)
    op = StageOperator(task_id="join_interval", stage="join-stream")
    assert table_asset("gold/join_results") in op.outlets and table_asset("bronze/arrivals") in op.inlets
    ctx = context(Ti())
    op.execute(ctx)
    extra = ctx["outlet_events"][table_asset("gold/join_results")].extra
    assert extra["rows"] == 42 and extra["dag_run"] == "r1" and extra["lag_s"] > 0
    # a check that failed: its verdict is still kept, and QualityEvent puts it on the results' event
    verdict = {"judged": "join_recall", "items": 12, "met": 9, "share_met": 0.75, "passed": False}
    stage_writing({"gold/join_results": verdict}, 3)
    check = StageOperator(task_id="validate_join", stage="validate-join", validation=True)
    ti = Ti()
    with pytest.raises(Exception, match="status 3"):
        check.execute(context(ti))
    assert ti.pushed[FIGURES_KEY] == {"gold/join_results": verdict}
    event = QualityEvent(check="validate_join", tables=["gold/join_results"])
    ctx = context(Ti({("validate_join", FIGURES_KEY): ti.pushed[FIGURES_KEY]}))
    event.execute(ctx)
    emitted = ctx["outlet_events"][table_asset("gold/join_results")]
    assert emitted.extra["met"] == 9 and emitted.extra["passed"] is False
    # a consumer gated on the events: held back by the miss, released by a passing verdict
    assert judged_and_met([emitted])[0] is False
    repaired = Event()
    repaired.extra = {**verdict, "met": 12, "share_met": 1.0, "passed": True}
    assert judged_and_met([repaired]) == (True, "judged by 1 check(s): 12 of 12 met")
    # a check that left no verdict (it failed before judging): nothing is emitted
    from airflow.sdk.exceptions import AirflowSkipException

    with pytest.raises(AirflowSkipException, match="left no verdict"):
        event.execute(context(Ti()))


def test_the_plugins_examples_hold(plugin_path):
    import doctest

    from outoforder_airflow import assets, pace, web

    for module in (assets, pace, web):
        failed, tried = doctest.testmod(module)
        assert tried and not failed, module.__name__


def test_the_live_page_says_whether_the_pipeline_keeps_pace(plugin_path):
    from datetime import UTC, datetime, timedelta

    from outoforder_airflow.pace import Run, page, summarize, text, verdict

    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def runs(dag: str, lag: callable, n: int = 12, state: str = "success") -> list[Run]:
        return [Run(dag, t0 + timedelta(minutes=i), state, t0 + timedelta(minutes=i, seconds=lag(i)))
                for i in range(n)]  # fmt: skip

    steady = summarize([*runs("join_stream", lambda i: 25), *runs("topk_stream", lambda i: 30 + (i % 2))],
                       {"join_stream": 40.0})  # fmt: skip
    assert [p.keeps_pace for p in steady] == [True, True]
    assert verdict(steady).startswith("keeps pace")
    growing = summarize(runs("join_stream", lambda i: 20 + 15 * i))  # every run longer than its minute
    assert growing[0].keeps_pace is False and verdict(growing).startswith("falls behind: join_stream")
    failed = summarize([Run("join_stream", t0, "failed", None)])  # no stage finished: not judged
    assert failed[0].keeps_pace is None and failed[0].states == {"failed": 1}
    shown = page(steady, t0)
    assert "http-equiv='refresh'" in shown and "keeps pace" in shown and "join_stream" in shown
    assert "40.0" in text(steady)  # the freshness column


def test_the_pace_command_says_when_airflows_database_is_not_ready(plugin_path, monkeypatch, capsys):
    import sqlite3

    from outoforder_airflow import pace
    from sqlalchemy.exc import OperationalError

    def starting():
        missing = sqlite3.OperationalError("no such table: dag_run")
        raise OperationalError("SELECT dag_run.run_id", {}, missing)

    monkeypatch.setattr(pace, "from_airflow", starting)
    assert pace.main() == 3
    assert "no such table: dag_run" in capsys.readouterr().err
