"""Airflow standalone as the scheduler tests drive it: its CLI, its REST API, and a browser.

``site`` is a dict with the instance's ``url`` and the admin's ``password`` (a fixture's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest


def run(cmd: list[str], env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """A command's completed process, its output captured."""
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def airflow(env: dict[str, str], *args: str) -> str:
    """The airflow CLI's output (it must succeed), run again while SQLite says it is locked."""
    exe = Path(sys.executable).parent / "airflow"
    for attempt in range(8):
        done = run([str(exe), *args], env, timeout=300)
        # SQLite in WAL mode refuses at once (whatever its busy timeout) a write from a transaction
        # that read before the scheduler's latest commit; the whole command was rolled back, so it
        # is run again, a little later each time (PostgreSQL, the scale-out metadata database, has
        # no such refusal)
        if done.returncode == 0 or "database is locked" not in done.stdout + done.stderr:
            break
        time.sleep(2 + 2 * attempt)
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def token(site: dict[str, Any]) -> str:
    """A REST API token for the admin."""
    body = json.dumps({"username": "admin", "password": site["password"]}).encode()
    req = urllib.request.Request(
        f"{site['url']}/auth/token", body, {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return str(json.load(resp)["access_token"])


def runs(site: dict[str, Any], dag_id: str) -> list[dict[str, Any]]:
    """The DAG's runs: id, state and logical date."""
    # the REST API, not the CLI: polling with a fresh CLI process costs a core-second each time
    req = urllib.request.Request(
        f"{site['url']}/api/v2/dags/{dag_id}/dagRuns?limit=100",
        headers={"Authorization": f"Bearer {token(site)}"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        got = json.load(resp)["dag_runs"]
    return [
        {
            "run_id": r["dag_run_id"],
            "state": r["state"],
            # an asset-triggered run has none
            "logical_date": None
            if r["logical_date"] is None
            else datetime.fromisoformat(r["logical_date"].replace("Z", "+00:00")).isoformat(),
        }
        for r in got
    ]


def api(site: dict[str, Any], path: str) -> Any:
    """The JSON of the REST API's ``/api/v2/<path>``."""
    req = urllib.request.Request(
        f"{site['url']}/api/v2/{path}", headers={"Authorization": f"Bearer {token(site)}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def tasks(site: dict[str, Any], dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """A run's task instances by task id."""
    got = api(site, f"dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances")
    return {t["task_id"]: t for t in got["task_instances"]}


def tries(site: dict[str, Any], dag_id: str, run_id: str) -> dict[str, int]:
    """How many tries each task of a run took."""
    return {k: int(t["try_number"]) for k, t in tasks(site, dag_id, run_id).items()}


def wait(site: dict[str, Any], dag_id: str, count: int, timeout_s: int = 1800) -> list[dict[str, Any]]:
    """The DAG's runs once ``count`` of them succeeded; fails the test at a failed run."""
    deadline = time.monotonic() + timeout_s
    seen: list[dict[str, Any]] = []
    last = None
    while time.monotonic() < deadline:
        seen = runs(site, dag_id)
        states = sorted(r["state"] for r in seen)
        if states != last:
            print(f"[test] {dag_id}: {states}", flush=True)
            last = states
        assert "failed" not in states, (seen, failure_notes(site, dag_id, seen))
        if len(seen) >= count and all(s == "success" for s in states):
            return seen
        time.sleep(5)
    pytest.fail(f"{dag_id}: runs not successful after {timeout_s} s: {seen}")


def failure_notes(site: dict[str, Any], dag_id: str, seen: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The last log lines of each failed task of the failed runs among ``seen`` (a failure's why)."""
    home = Path(site.get("env", {}).get("AIRFLOW_HOME", ""))
    notes: dict[str, list[str]] = {}
    for r in seen:
        if r["state"] != "failed":
            continue
        for task_id, ti in tasks(site, dag_id, r["run_id"]).items():
            if ti["state"] != "failed":
                continue
            folder = home / "logs" / f"dag_id={dag_id}" / f"run_id={r['run_id']}" / f"task_id={task_id}"
            lines: list[str] = []
            for attempt in sorted(folder.glob("attempt=*.log")):
                for line in attempt.read_text(errors="replace").splitlines()[-15:]:
                    try:
                        lines.append(f"{attempt.stem}: {json.loads(line).get('event', line)}"[:600])
                    except ValueError:
                        lines.append(f"{attempt.stem}: {line}"[:600])
            notes[f"{r['run_id']}/{task_id}"] = lines
    return notes


def browser() -> Any:
    """Headless Chromium through its chromedriver (both installed by infra/setup.sh)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are installed by infra/setup.sh"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=opts)


def finished(site: dict[str, Any], dag_id: str, run_id: str, timeout_s: int = 900) -> str:
    """A run's final state (success or failed), waited for."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = next((r["state"] for r in runs(site, dag_id) if r["run_id"] == run_id), None)
        if state in ("success", "failed"):
            return str(state)
        time.sleep(5)
    pytest.fail(f"{dag_id} {run_id}: not finished after {timeout_s} s")


def log_in(driver: Any, site: dict[str, Any], path: str, shot: Path | None = None) -> None:
    """Open ``path``: Airflow's login page comes first (saved to ``shot``), then the page itself."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 60)
    driver.get(f"{site['url']}{path}")
    wait.until(ec.presence_of_element_located((By.NAME, "username")))
    if shot is not None:
        driver.save_screenshot(str(shot))
    driver.find_element(By.NAME, "username").send_keys("admin")
    driver.find_element(By.NAME, "password").send_keys(site["password"])
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda b: "/auth/login" not in b.current_url)


def page_has(driver: Any, text: str, timeout_s: int = 60) -> None:
    """Wait until the page's text holds ``text`` (case-insensitive)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout_s).until(
        lambda b: text.lower() in b.find_element(By.TAG_NAME, "body").text.replace("\xa0", " ").lower()
    )


def screenshots(name: str) -> Path:
    """An empty folder for a browser test's screenshots: ``$OOO_TEST_ARTIFACTS/<name>``."""
    repo = Path(__file__).resolve().parents[2]
    shots = Path(os.environ.get("OOO_TEST_ARTIFACTS", repo / ".local" / "test-artifacts")) / name
    shots.mkdir(parents=True, exist_ok=True)
    for old in shots.glob("*"):
        old.unlink()
    return shots


@contextmanager
def browsing(shots: Path) -> Iterator[Any]:
    """A browser for the block; on a failure its page (screenshot, address and text) is kept in ``shots``."""
    from selenium.webdriver.common.by import By

    driver = browser()
    try:
        yield driver
    except Exception:
        driver.save_screenshot(str(shots / "99-failure.png"))
        (shots / "99-failure.txt").write_text(
            driver.current_url + "\n" + driver.find_element(By.TAG_NAME, "body").text
        )
        raise
    finally:
        driver.quit()
