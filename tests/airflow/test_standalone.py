"""The pipeline on a real scheduler: Airflow standalone started by infra/airflow.sh, then a browser.

One Airflow (scheduler, DAG processor, API server, triggerer; SQLite; LocalExecutor) serves the
module. The stream DAG ``topk_stream`` is unpaused and triggered over two arrival intervals of a
short replay (the second run starts from the first one's state), ``airflow backfill create`` runs
``theta_backfill`` over a past range as an equi-join with the MCF pre-filter, and the Delta
outputs must have no duplicates and equal a direct run of the same stages. The reports answer 401
without a logged-in user. Then headless Chromium (Debian's, through its chromedriver) opens a report,
is sent to the login page and back, finds the DAGs and a successful run, and opens
the quality report and the Data Docs; screenshots go to ``$OOO_TEST_ARTIFACTS`` (default
``.local/test-artifacts``).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from outoforder.stages import spec
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.theta.spec import ThetaJob
from outoforder.stages.topk.spec import DEMO_JOB as TOPK_DEMO
from tests import sparkconf
from tests.airflow import standalone as sa
from tests.airflow.conftest import REPO, run_probe
from tests.services import connect_client, connect_env, free_port

# the module's Airflow and its pipeline run inside the first test's set-up
pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.timeout(2400)]

SECONDS = 3  # the replay: 3 s of play from 1970-01-01 02:59:13 (the DEBS game clock)
SOURCE = f"synthetic/hpm_game1-{SECONDS}s-seed7"
CONF = {"source": SOURCE, "on_violation": "warn"}  # a 3 s replay closes no top-k window: no verdict
# manual runs cover the minute before their logical date (outoforder_airflow.operators.interval_args):
# the first run has no arrivals, the second all of them, from the first run's state
TOPK_DATES = ["1970-01-01T02:59:00+00:00", "1970-01-01T03:00:00+00:00"]
TOPK_SPAN = ("1970-01-01T02:58:00", "1970-01-01T03:00:00")
# a run covers the minute before its logical date: two runs, [02:59, 03:00) and [03:00, 03:01), side
# by side (a backfill's own max active runs), writing the same source's slices of the θ tables; an
# equi-join on x with the MCF pre-filter (the replay's positions repeat often enough to give results)
THETA_FROM, THETA_TO = "1970-01-01T03:00:00", "1970-01-01T03:01:00"
THETA_SPAN = ("1970-01-01T02:59:00", "1970-01-01T03:01:00")
THETA_CONF = {**CONF, "predicates": "=", "prefilter": "mcf", "partitions": 4}
# the main job's top-k query (the declared one, the seed's, has 60 s windows: none closes here)
TOPK_CONF = {**CONF, **TOPK_DEMO.option_values()}


def _options(job: spec.Job) -> list[str]:
    """The CLI options that run ``job`` (what the DAG's Params pass; the defaults come from the job)."""
    out = []
    for name, value in job.option_values().items():
        if value is not None:
            out += [type(job).option(name).flag, str(value)]
    return out


TOPK_DIRECT = _options(TOPK_DEMO)  # what the topk_stream runs are given
JOIN_DIRECT = _options(JoinJob())  # the join_stream runs': the declared defaults
THETA_DIRECT = _options(ThetaJob.from_options(THETA_CONF))

DIRECT = r"""
import json, sys
from outoforder.stages.cli import main
for args in json.loads(sys.argv[1]):
    assert main(args) == 0, args
"""
OUTPUTS = r"""
import json, sys
from outoforder.config import load_settings
from outoforder.spark.session import get_spark
from outoforder.io import delta
from outoforder.io.tables import JOIN_RESULTS, THETA_RESULTS, THETA_WINDOWS, TOPK_RESULTS
s = load_settings(); spark = get_spark(s)
def outputs(root):
    def rows(table, cols):
        df = delta.read(spark, table, root).select(*cols)
        return sorted([list(r) for r in df.collect()], key=repr)
    return {
        "topk_results": rows(
            TOPK_RESULTS,
            ["job", "window_id", "window_end_us", "size", "emitted_at_seq", "cache_us", "rank", "seq", "ts",
             "score"],
        ),
        "theta_results": rows(THETA_RESULTS, ["job", "window_start_us", "seqs"]),
        "join_results": rows(
            JOIN_RESULTS, ["job", "r_seq", "s_seq", "emitted_at_seq", "d_r_us", "d_s_us", "params_version"]
        ),
        "theta_windows": rows(
            THETA_WINDOWS, ["job", "window_start_us", "output_rows", "prefilter", "rows", "kept_rows"]
        ),
    }
# this process's own lake (the direct runs'), and the lake the DAG runs wrote
print("OUT" + json.dumps({"direct": outputs(s.lake_root), "airflow": outputs(sys.argv[2])}))
"""


def _stage(env: dict[str, str], *args: str) -> None:
    python = str(Path(env["OOO_SPARK_VENV"]) / "bin" / "python")
    done = sa.run([python, "-m", "outoforder.stages", *args], env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("standalone")
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            # what infra/airflow.sh sets by default, here for this test's own CLI calls as well
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow' / 'airflow.db'}?timeout=60",
            "OOO_LAKE_ROOT": str(home / "lake"),
            "OOO_AIRFLOW_PORT": str(free_port()),
            "OOO_AIRFLOW_LOG_PORT": str(free_port()),
            "OOO_AIRFLOW_TRIGGER_LOG_PORT": str(free_port()),
            # only the runs this test creates: no run for the current minute of the wall clock
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            # the DAG files do not change during the test: parse them once, not every 30 s
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "900",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "900",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "900",
            # infra/airflow.sh starts the Spark Connect server the tasks are clients of, here
            **connect_env(home),
            **sparkconf.stage_env(home),
        }
    )
    start = sa.run(["bash", str(REPO / "infra" / "airflow.sh"), "start"], env, timeout=900)
    try:
        assert start.returncode == 0, start.stdout[-3000:] + start.stderr[-3000:]
        ready = next(ln for ln in start.stdout.splitlines() if "ready: UI at" in ln)
        asked = sa.run(["bash", str(REPO / "infra" / "airflow.sh"), "password"], env, timeout=60)
        password = asked.stdout.strip()
        assert password and password not in start.stdout + start.stderr  # said only when asked for
        assert "airflow.sh password" in ready
        airflow_home = Path(env["AIRFLOW_HOME"])  # owner-only: the password, the DB, the logs
        assert airflow_home.stat().st_mode & 0o777 == 0o700
        assert (airflow_home / "simple_auth_manager_passwords.json.generated").stat().st_mode & 0o077 == 0
        client = {**env, **connect_client(env)}  # the test's own stages use the same server
        _stage(client, "replay", "--seconds", str(SECONDS))
        # the direct runs get a copy of the same bronze (same arrival sequence numbers)
        shutil.copytree(home / "lake", home / "direct-lake")
        yield {
            "env": env,
            "client": client,
            "home": home,
            "url": f"http://127.0.0.1:{env['OOO_AIRFLOW_PORT']}",
            "password": password,
        }
    finally:
        # also stops the server it started
        sa.run(["bash", str(REPO / "infra" / "airflow.sh"), "stop"], env, timeout=120)


@pytest.fixture(scope="module")
def pipeline(standalone):
    env = standalone["env"]
    # the backfill first, while the scheduler has no run to write about (a busy scheduler's commits
    # made every attempt of it fail on SQLite, see _airflow); it starts when its DAG is unpaused
    sa.airflow(
        env, "backfill", "create", "--dag-id", "theta_backfill",
        "--from-date", THETA_FROM, "--to-date", THETA_TO, "--dag-run-conf", json.dumps(THETA_CONF),
    )  # fmt: skip
    # a stream DAG's backfill over the replay's two minutes: its runs start side by side, their
    # passes go one at a time, each exactly its interval (no catch-up), the oldest first
    sa.airflow(
        env, "backfill", "create", "--dag-id", "join_stream",
        "--from-date", THETA_FROM, "--to-date", THETA_TO, "--dag-run-conf", json.dumps(CONF),
    )  # fmt: skip
    for dag_id in ("topk_stream", "theta_backfill", "join_stream"):
        sa.airflow(env, "dags", "unpause", dag_id)
    for date in TOPK_DATES:  # in order: each run depends on the previous one (state)
        sa.airflow(env, "dags", "trigger", "topk_stream", "--logical-date", date, "-c", json.dumps(TOPK_CONF))
    topk = sa.wait(standalone, "topk_stream", len(TOPK_DATES))
    theta = sa.wait(standalone, "theta_backfill", 2)
    join = sa.wait(standalone, "join_stream", 2)
    return {"topk": topk, "theta": theta, "join": join}


def test_scheduler_runs_the_pipeline_and_a_backfill_like_a_direct_run(standalone, pipeline):
    env, home = standalone["env"], standalone["home"]
    assert sorted(r["logical_date"] for r in pipeline["topk"]) == TOPK_DATES
    assert [r["state"] for r in pipeline["theta"]] == ["success", "success"]
    # the backfill's runs side by side: each succeeded at its first attempt (a conflict between their
    # commits is retried inside the stage, not by a failed attempt)
    for run in pipeline["theta"]:
        assert sa.tries(standalone, "theta_backfill", run["run_id"])["theta_join"] == 1, run
    spark_python = str(Path(env["OOO_SPARK_VENV"]) / "bin" / "python")

    # the same stages run directly on a copy of the same bronze, in one process (one Spark Connect
    # session) that then reads both lakes' outputs
    direct = dict(standalone["client"], OOO_LAKE_ROOT=str(home / "direct-lake"))
    runs = [
        ["topk-stream", "--source", SOURCE, *TOPK_DIRECT, "--start", TOPK_SPAN[0], "--end", TOPK_SPAN[1]],
        ["theta-join", "--source", SOURCE, *THETA_DIRECT, "--start", THETA_SPAN[0], "--end", THETA_SPAN[1]],
        # the join backfill's range in one pass
        ["join-stream", "--source", SOURCE, *JOIN_DIRECT, "--start", THETA_SPAN[0], "--end", THETA_SPAN[1]],
    ]  # fmt: skip
    both = run_probe(spark_python, DIRECT + OUTPUTS, "OUT", direct, json.dumps(runs), env["OOO_LAKE_ROOT"])
    through_airflow, expected = both["airflow"], both["direct"]

    assert through_airflow["topk_results"], "the replay produced no top-k result"
    assert through_airflow["theta_results"], "the backfill produced no θ-join row"
    windows = through_airflow["theta_windows"]  # the runs' two minutes in 10 s windows
    assert len(windows) == 12
    assert {w[3] for w in windows} == {"mcf"}
    assert sum(w[2] for w in windows) == len(through_airflow["theta_results"])
    kept, rows = sum(sum(w[5] or [0]) for w in windows), sum(sum(w[4]) for w in windows)
    assert 0 < kept <= rows  # the pre-filter ran, and passed on at most every row
    assert through_airflow["join_results"], "the join backfill produced no pair"
    key = {"topk_results": (0, 1, 6), "theta_results": (0, 1, 2), "theta_windows": (0, 1),
           "join_results": (0, 1, 2)}  # a row's identity  # fmt: skip
    for table, rows in through_airflow.items():
        keys = [json.dumps([r[i] for i in key[table]]) for r in rows]
        assert len(keys) == len(set(keys)), f"duplicates in {table}"
        assert rows == expected[table], table

    # the results are an asset whose events carry what each run wrote and its check's graded verdict
    (asset,) = [a for a in sa.api(standalone, "assets?name_pattern=gold/join_results")["assets"]
                if a["name"] == "gold/join_results"]  # fmt: skip
    events = sa.api(standalone, f"assets/events?asset_id={asset['id']}&order_by=-timestamp&limit=50")
    extras = [e["extra"] for e in events["asset_events"]]
    verdicts = [x for x in extras if x.get("judged") == "join_recall"]
    assert verdicts and all("items" in v and "met" in v and "passed" in v for v in verdicts), extras
    assert any(x.get("rows", 0) > 0 and "end_us" in x for x in extras), extras  # the stage's own
    # every run ended with its own quality report page and Data Docs entries
    reports = home / "reports"
    for run in pipeline["topk"]:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"topk_stream__{run['run_id']}")
        assert (reports / "quality" / "runs" / f"{safe.strip('_')}.html").is_file(), run["run_id"]
    assert "topk_completeness" in (reports / "data_docs" / "index.html").read_text()


# A failing stage: a θ window that does not divide the run's minute (a ConfigError in each of the
# task's tries). A failing check: the join with a recall target its first retentions cannot meet
# (nothing buffered before the first adaptation, every period to reach 0.999, and the settings of
# a user who asks it of every period: quality.periods_met = 1.0, through the run's config Param).
FAILING = {
    "theta_backfill": {**THETA_CONF, "window_s": 7, "on_violation": "fail"},
    "join_stream": {**CONF, "on_violation": "fail", "q_user": 0.999, "initial_retention_s": 0.0,
                    "period_s": 1.0, "interval_s": 0.5},
}  # fmt: skip
FAILED_TASK = {"theta_backfill": ("theta_join", "cut at multiples of the window"),
               "join_stream": ("validate_join", "exited with status 3")}  # fmt: skip
# dates no other run of the module has (a DAG has one run per logical date): the join's covers the
# replay's arrivals, the θ-join's any minute
FAILING_AT = {"theta_backfill": "1970-01-01T03:05:00+00:00", "join_stream": "1970-01-01T02:59:59+00:00"}


def test_a_failed_stage_or_check_fails_its_run(standalone, pipeline):
    # Airflow derives a run's state from its leaves: the report (all_done) would leave it green,
    # the run_outcome task fails it, and quotes the failed task
    env = standalone["env"]
    every_period = standalone["home"] / "every-period.toml"
    test_settings = Path(env["OOO_CONFIG"]).read_text() if env.get("OOO_CONFIG") else ""
    every_period.write_text(test_settings + "\n[quality]\nperiods_met = 1.0\n")
    for dag_id, conf in FAILING.items():
        if dag_id == "join_stream":
            conf = {**conf, "config": str(every_period)}
        sa.airflow(env, "dags", "unpause", dag_id)
        sa.airflow(env, "dags", "trigger", dag_id, "--run-id", f"failing_{dag_id}",
                 "--logical-date", FAILING_AT[dag_id], "-c", json.dumps(conf))  # fmt: skip
    for dag_id in FAILING:
        run_id = f"failing_{dag_id}"
        assert sa.finished(standalone, dag_id, run_id) == "failed", dag_id
        tasks = sa.tasks(standalone, dag_id, run_id)
        task, said = FAILED_TASK[dag_id]
        assert tasks[task]["state"] == "failed", tasks[task]
        assert tasks["quality_report"]["state"] == "success"  # the failure still got its page
        assert tasks["run_outcome"]["state"] == "failed"
        note = sa.api(standalone, f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task}/xcomEntries/failure")
        assert said in str(note["value"]), note


def test_the_reports_need_a_logged_in_user(standalone, pipeline):
    page = f"{standalone['url']}/outoforder/reports/quality/index.html"
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(page, timeout=30)
    assert anonymous.value.code == 401
    forged = urllib.request.Request(page, headers={"Authorization": "Bearer forged"})
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(forged, timeout=30)
    assert bad.value.code == 403
    # the REST API's token opens them (for scripts); the browser test below uses the UI's cookie
    signed = urllib.request.Request(page, headers={"Authorization": f"Bearer {sa.token(standalone)}"})
    with urllib.request.urlopen(signed, timeout=30) as resp:
        assert "Data quality: cumulative" in resp.read().decode()


def test_browser_logs_in_finds_a_successful_run_and_opens_the_reports(standalone, pipeline):
    from selenium.webdriver.common.by import By

    shots = sa.screenshots("browser")
    url = standalone["url"]

    def page_has(text: str) -> None:
        sa.page_has(browser, text)

    with sa.browsing(shots) as browser:
        # the reports are behind Airflow's login: a report's address leads to it, and back after it
        sa.log_in(browser, standalone, "/outoforder/reports/quality/index.html", shots / "01-login.png")
        page_has("Data quality: cumulative")

        browser.get(f"{url}/dags")
        page_has("topk_stream")
        page_has("theta_backfill")
        browser.save_screenshot(str(shots / "02-dags.png"))

        run = next(r for r in pipeline["topk"] if r["logical_date"] == TOPK_DATES[1])
        browser.get(f"{url}/dags/topk_stream/runs/{run['run_id']}")
        page_has(run["run_id"])
        page_has("success")
        page_has("Quality report")  # the plugin's tab on every DAG run page
        page_has("StageOperator")
        browser.save_screenshot(str(shots / "03-run.png"))

        # the plugin's page for this run, as its "Quality report" tab and extra link open it
        browser.get(f"{url}/outoforder/run/topk_stream/{run['run_id']}")
        page_has("Data quality: run topk_stream__")
        page_has("Continuous top-k")
        browser.save_screenshot(str(shots / "04-run-report.png"))
        browser.find_element(By.LINK_TEXT, "Cumulative report").click()
        page_has("Data quality: cumulative")
        page_has("θ-join backfills")
        browser.save_screenshot(str(shots / "05-report.png"))

        # a suite's result in Data Docs, from the report's validations table
        browser.find_element(By.LINK_TEXT, "topk_completeness").click()
        page_has("Expectation Validation Result")
        page_has("topk_completeness")
        browser.save_screenshot(str(shots / "06-data-docs-result.png"))
        # the Data Docs index builds its tables with scripts from public CDNs: offline it shows only
        # its frame, so only the page itself is checked here (docs/quality.md)
        browser.get(f"{url}/outoforder/docs/index.html")
        page_has("Data Docs")
        browser.save_screenshot(str(shots / "07-data-docs.png"))
        # the tables as assets, the join's results among them
        browser.get(f"{url}/assets")
        page_has("gold/join_results")
        browser.save_screenshot(str(shots / "08-assets.png"))
        # the live page: each stream DAG's pace (no scheduled run here: it says so) and a reload
        browser.get(f"{url}/outoforder/live")
        page_has("Live pace")
        verdict = browser.find_element(By.ID, "verdict").text
        assert verdict, "the live page says whether the pipeline keeps pace"
        browser.save_screenshot(str(shots / "09-live.png"))
    print(f"[test] screenshots in {shots}", flush=True)
    assert len(list(shots.glob("0*.png"))) == 9
