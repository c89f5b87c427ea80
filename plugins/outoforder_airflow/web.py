"""The reports web app mounted on Airflow's API server: quality reports and Data Docs as pages.

Served under ``/outoforder``: ``/outoforder/reports/...`` is the reports folder
(``quality.reports_dir``: the quality report at ``quality/index.html``, run pages under
``quality/runs/``), ``/outoforder/docs/...`` the Data Docs site (``quality.docs_dir``) and
``/outoforder/run/<dag_id>/<run_id>`` a DAG run's own report (the cumulative one until the run has
written its own).

Airflow mounts plugin apps without its login, so the app checks it itself: every request needs the
JWT of a logged-in user, as the UI's session cookie or an ``Authorization: Bearer`` header (the
REST API's token). Without one, a browser is sent to Airflow's login page (and back after it); any
other client gets 401, and an invalid or expired token gets Airflow's own 401/403.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from outoforder.quality.checkpoints import safe_run_name  # stdlib-only at import (GX is imported lazily)

# the cookie Airflow's UI keeps the logged-in user's JWT in (BaseAuthManager's COOKIE_NAME_JWT_TOKEN)
TOKEN_COOKIE = "_token"

Resolver = Callable[[str | None], Awaitable[Any]]


async def _airflow_user(token: str | None) -> Any:
    """The user a JWT names, by Airflow's auth manager; raises HTTPException (401/403) otherwise."""
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    return await resolve_user_from_token(token)


def _login_url(next_url: str) -> str:
    from airflow.api_fastapi.app import get_auth_manager

    return str(get_auth_manager().get_url_login(next_url=next_url))


def create_app(resolve_user: Resolver = _airflow_user, login_url: Callable[[str], str] = _login_url) -> Any:
    """The FastAPI app (built when the API server loads the plugin).

    ``resolve_user`` and ``login_url`` are Airflow's by default; tests pass their own.
    """
    from fastapi import FastAPI, HTTPException, Request, Response
    from fastapi.responses import JSONResponse, RedirectResponse
    from fastapi.staticfiles import StaticFiles

    from outoforder.config import load_settings
    from outoforder_airflow.links import URL_PREFIX

    quality = load_settings().quality
    for folder in (quality.reports_dir, quality.docs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    app = FastAPI(title="outoforder reports", docs_url=None, redoc_url=None, openapi_url=None)

    @app.middleware("http")
    async def require_login(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # the middleware wraps the mounted static folders too: no page is served without a user
        header = request.headers.get("authorization", "")
        bearer = header[7:].strip() if header.lower().startswith("bearer ") else None
        token = bearer or request.cookies.get(TOKEN_COOKIE)
        if token is None and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(login_url(str(request.url)))
        try:
            await resolve_user(token)
        except HTTPException as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status_code)
        return await call_next(request)

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
