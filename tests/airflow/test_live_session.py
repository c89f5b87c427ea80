"""Live mode as a user runs it: ``infra/live.sh start``, the scheduler's own runs every minute, a browser.

One short live session (a replay at a fiftieth of the papers' rates, its own broker, Spark Connect
server, Airflow and folders) serves the module; its aggregates and top-k DAGs are paused after
their first run, which gives the live page their lags (the live soak, ``infra/bench.sh live``,
runs them all for an hour). The example consumer ``join_results_consumer`` is
unpaused beside the stream DAGs: it is released by the scheduled join runs' verdicts, and held back
by a join run whose check misses its target (a run the test triggers with a recall target its
first retentions cannot meet). Then a browser logs in, finds ``gold/join_results`` among the
assets with its newest event's quality figures, and reads each stream DAG's lag on the live page;
``bash infra/live.sh status`` prints the same figures. Screenshots go to
``$OOO_TEST_ARTIFACTS/live`` (default ``.local/test-artifacts``).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.airflow import standalone as sa
from tests.airflow.conftest import REPO
from tests.services import connect_env, free_port

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.timeout(1500)]

RATE = 0.02  # ~220 tuples/s: the scheduler's cadence and the checks are what is tested, not the rate
MINUTES = 8  # the replay's play; the session is stopped as soon as the tests are done
CONSUMER = "join_results_consumer"
STREAM_DAGS = ("ingest_kafka", "join_stream", "aggregate_stream", "topk_stream")  # the live page's rows
SIDE_DAGS = ("aggregate_stream", "topk_stream")  # paused after their first run (see the fixture)
RESULTS = "gold/join_results"
FOLDED = ".codicon-folding-collapsed"  # a folded block's chevron in Airflow's JSON fields (Monaco)
# a join whose check fails: a recall target its first retentions cannot meet (nothing buffered
# before the first adaptation, every period to reach 0.999, asked of every period)
MISSING = {
    "on_violation": "fail",
    "q_user": 0.999,
    "initial_retention_s": 0.0,
    "period_s": 1.0,
    "interval_s": 0.5,
}


def _live(env: dict[str, str], *args: str) -> str:
    done = sa.run(["bash", str(REPO / "infra" / "live.sh"), *args], env, timeout=900)
    assert done.returncode == 0, f"live.sh {args[0]}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("live")
    env = {
        **os.environ,
        "OOO_LIVE_DIR": str(work / "live"),
        "OOO_KAFKA_DATA": str(work / "kafka"),
        "OOO_KAFKA_PORT": str(free_port()),
        "OOO_KAFKA_CONTROLLER_PORT": str(free_port()),
        "OOO_AIRFLOW_PORT": str(free_port()),
        "OOO_AIRFLOW_LOG_PORT": str(free_port()),
        "OOO_AIRFLOW_TRIGGER_LOG_PORT": str(free_port()),
        **connect_env(work),
    }
    env.pop("OOO_CONFIG", None)  # the session writes its own
    try:
        _live(env, "start", "--rate", str(RATE), "--minutes", str(MINUTES))
        session = Path(os.path.realpath(work / "live" / "current"))
        # the session's Airflow, as `eval "$(bash infra/live.sh env)"` gives it to a user
        evaluated = sa.run(
            ["bash", "-c", f'eval "$(bash {REPO}/infra/live.sh env)" && env -0'], env, timeout=120
        )
        assert evaluated.returncode == 0, evaluated.stderr
        client = dict(v.split("=", 1) for v in evaluated.stdout.split("\0") if "=" in v)
        passwords = session / "airflow" / "simple_auth_manager_passwords.json.generated"
        site = {
            "env": env,
            "client": client,
            "session": session,
            "url": f"http://127.0.0.1:{env['OOO_AIRFLOW_PORT']}",
            "password": json.loads(passwords.read_text())["admin"],
        }
        # live mode unpauses the stream DAGs once the first is parsed; the consumer may come later
        _until(
            f"{CONSUMER} parsed",
            120,
            lambda: any(d["dag_id"] == CONSUMER for d in sa.api(site, "dags")["dags"]),
        )
        sa.airflow(client, "dags", "unpause", CONSUMER)
        # the aggregates and top-k are here for the live page's rows: once each has a scheduled run
        # whose stage did work (its lag measured) they are paused, so that the join's runs, which
        # the consumer follows, do not share the machine with them for the rest of the session
        # (the live soak runs them all)
        for dag_id in SIDE_DAGS:
            _until(f"a {dag_id} run with a lag", 600, lambda d=dag_id: _stage_succeeded(site, d))
            sa.airflow(client, "dags", "pause", dag_id)
        yield site
    finally:
        sa.run(["bash", str(REPO / "infra" / "live.sh"), "stop"], env, timeout=300)


def _stage_succeeded(site: dict[str, Any], dag_id: str) -> bool:
    """Whether a scheduled run of a stream DAG has a stream stage that succeeded: its lag is measured."""
    from outoforder_airflow.pace import stage_tasks

    task = stage_tasks()[dag_id][0]
    return any(
        sa.tasks(site, dag_id, r["run_id"]).get(task, {}).get("state") == "success"
        for r in sa.runs(site, dag_id)
        if r["run_id"].startswith("scheduled__") and r["state"] in ("success", "failed")
    )


def _gate_runs(site: dict[str, Any]) -> list[tuple[dict[str, Any], str | None, list[dict[str, Any]]]]:
    """The consumer's finished runs: the run, its gate's state, the verdicts that triggered it."""
    out = []
    for run in sa.runs(site, CONSUMER):
        if run["state"] not in ("success", "failed"):
            continue
        gate = sa.tasks(site, CONSUMER, run["run_id"]).get("gate", {}).get("state")
        got = sa.api(site, f"dags/{CONSUMER}/dagRuns/{urllib.parse.quote(run['run_id'])}/upstreamAssetEvents")
        verdicts = [e["extra"] for e in got["asset_events"] if (e.get("extra") or {}).get("judged")]
        out.append((run, gate, verdicts))
    return out


def _until(what: str, timeout_s: int, probe: Any) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(10)
    pytest.fail(f"not within {timeout_s} s: {what}")


def test_the_consumer_gets_results_that_met_their_target_and_not_a_missed_period(live):
    # the scheduled join runs' checks pass: their verdicts release the consumer
    released = _until(
        "a consumer run released by a passed join check", 600,
        lambda: [g for g in _gate_runs(live) if g[1] == "success"],
    )  # fmt: skip
    run, _, verdicts = released[0]
    judged = [v for v in verdicts if v["items"] >= 1]  # a check before any period closed judged none
    assert judged and all(v["passed"] for v in judged), run
    assert all(v["judged"] == "join_recall" for v in judged)
    # a join run whose check misses its target: failed, and its verdict on the asset says so
    strict = live["session"] / "every-period.toml"
    strict.write_text(
        Path(live["client"]["OOO_CONFIG"])
        .read_text()
        .replace("[quality]\n", "[quality]\nperiods_met = 1.0\n", 1)
    )
    at = (datetime.now(UTC) - timedelta(seconds=30)).replace(microsecond=0)  # no scheduled run's date
    conf = {**MISSING, "config": str(strict)}
    sa.airflow(live["client"], "dags", "trigger", "join_stream", "--run-id", "missing",
               "--logical-date", at.isoformat(), "-c", json.dumps(conf))  # fmt: skip
    assert sa.finished(live, "join_stream", "missing") == "failed"
    assert sa.tasks(live, "join_stream", "missing")["validate_join"]["state"] == "failed"
    events = sa.api(live, "assets/events?source_run_id=missing&limit=10")["asset_events"]
    missed = [e["extra"] for e in events if (e.get("extra") or {}).get("judged")]
    assert missed and not any(v["passed"] for v in missed), events
    assert all(v["met"] < v["items"] for v in missed)
    # the consumer run that event starts is held back: its gate skipped, nothing after it ran
    held = _until(
        "a consumer run holding back the missed period", 300,
        lambda: [g for g in _gate_runs(live) if any(v.get("dag_run") == "missing" for v in g[2])],
    )  # fmt: skip
    run, gate, _ = held[0]
    assert gate == "skipped", run
    assert sa.tasks(live, CONSUMER, run["run_id"])["use"]["state"] == "skipped"
    assert run["state"] == "success"  # held back is not a failure of the consumer


def test_browser_finds_the_quality_of_join_results_and_each_dag_s_lag(live):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    shots = sa.screenshots("live")
    (asset,) = sa.api(live, "assets?name_pattern=gold%2Fjoin_results")["assets"]
    newest = sa.api(live, f"assets/events?asset_id={asset['id']}&order_by=-timestamp&limit=20")[
        "asset_events"
    ]
    judged = next(e["extra"] for e in newest if (e.get("extra") or {}).get("judged"))
    with sa.browsing(shots) as browser:
        sa.log_in(browser, live, "/assets", shots / "01-login.png")
        sa.page_has(browser, RESULTS)
        browser.save_screenshot(str(shots / "02-assets.png"))
        browser.get(f"{live['url']}/assets/{asset['id']}")
        # the newest events' quality figures: each event's extra as JSON, folded (a code editor,
        # whose spaces are non-breaking): unfolded as a user does, by its chevron
        sa.page_has(browser, "Asset Events")
        WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, FOLDED))
        for fold in browser.find_elements(By.CSS_SELECTOR, FOLDED):
            ActionChains(browser).move_to_element(fold).click().perform()
        sa.page_has(browser, '"recall_min"')
        sa.page_has(browser, f'"items": {judged["items"]},')
        browser.save_screenshot(str(shots / "03-join-results.png"))
        browser.get(f"{live['url']}/outoforder/live")
        sa.page_has(browser, "Live pace")
        rows = {
            cells[0].text: [c.text for c in cells]
            for row in browser.find_elements(By.CSS_SELECTOR, "#pace tr")
            if (cells := row.find_elements(By.TAG_NAME, "td"))
        }
        header = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#pace th")]
        lag = header.index("last lag (s)")
        for dag_id in STREAM_DAGS:
            assert float(rows[dag_id][lag]) > 0, rows  # every stream DAG has a measured lag
        assert browser.find_element(By.ID, "verdict").text
        browser.save_screenshot(str(shots / "04-live.png"))
    # the command prints the same figures
    status = _live(live["env"], "status")
    for dag_id in STREAM_DAGS:
        assert re.search(rf"^{dag_id}\s+\d+", status, flags=re.M), status
