"""The reports web app mounted on Airflow's API server: quality reports and Data Docs as pages.

Served under ``/outoforder``: ``/outoforder/reports/...`` is the reports folder
(``quality.reports_dir``: the quality report at ``quality/index.html``, run pages under
``quality/runs/``), ``/outoforder/docs/...`` the Data Docs site (``quality.docs_dir``) and
``/outoforder/run/<dag_id>/<run_id>`` a DAG run's own report (the cumulative one until the run has
written its own). Plugin apps are not behind Airflow's login: expose the API server only where the
reports may be read.
"""

from __future__ import annotations

from typing import Any

from outoforder.quality.checkpoints import safe_run_name  # stdlib-only at import (GX is imported lazily)


def create_app() -> Any:
    """The FastAPI app (built when the API server loads the plugin)."""
    from fastapi import FastAPI
    from fastapi.responses import RedirectResponse
    from fastapi.staticfiles import StaticFiles

    from outoforder.config import load_settings
    from outoforder_airflow.links import URL_PREFIX

    quality = load_settings().quality
    for folder in (quality.reports_dir, quality.docs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    app = FastAPI(title="outoforder reports", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/")
    def index() -> RedirectResponse:
        return RedirectResponse(f"{URL_PREFIX}/reports/quality/index.html")

    @app.get("/run/{dag_id}/{run_id:path}")
    def run_report(dag_id: str, run_id: str) -> RedirectResponse:
        page = f"quality/runs/{safe_run_name(f'{dag_id}__{run_id}')}.html"
        if not (quality.reports_dir / page).is_file():
            page = "quality/index.html"
        return RedirectResponse(f"{URL_PREFIX}/reports/{page}")

    app.mount(
        "/reports", StaticFiles(directory=quality.reports_dir, html=True, check_dir=False), name="reports"
    )
    app.mount("/docs", StaticFiles(directory=quality.docs_dir, html=True, check_dir=False), name="docs")
    return app
