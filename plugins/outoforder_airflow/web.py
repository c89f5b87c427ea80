"""The reports web app mounted on Airflow's API server: quality reports and Data Docs as pages.

Served under ``/outoforder``: ``/outoforder/reports/...`` is the reports folder
(``quality.reports_dir``: the quality report at ``quality/index.html``, run pages under
``quality/runs/``), ``/outoforder/docs/...`` the Data Docs site (``quality.docs_dir``) and
``/outoforder/run/<dag_id>/<run_id>`` a DAG run's own report (the cumulative one until the run has
written its own), ``/outoforder/live`` the stream DAGs' pace (:mod:`outoforder_airflow.pace`; it
reloads itself).

Airflow mounts plugin apps without its login, so the app checks it itself: every request needs the
JWT of a logged-in user, as the UI's session cookie or an ``Authorization: Bearer`` header (the
REST API's token). Without one, a browser is sent to Airflow's login page (and back after it); any
other client gets 401, and an invalid or expired token gets Airflow's own 401/403.

Then the DAG permissions of Airflow's auth manager apply: a run's page (``/run/<dag_id>/…`` and
``quality/runs/<dag_id>__<run_id>.html``) needs read access to that DAG; every other page (the
cumulative report and Data Docs, which cover every DAG's checks) needs read access to all DAGs.
Otherwise 403. Every response carries a Content-Security-Policy that allows this origin only.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Awaitable, Callable
from typing import Any

from outoforder.quality.checkpoints import safe_run_name  # stdlib-only at import (GX is imported lazily)

# the cookie Airflow's UI keeps the logged-in user's JWT in (BaseAuthManager's COOKIE_NAME_JWT_TOKEN)
TOKEN_COOKIE = "_token"

Resolver = Callable[[str | None], Awaitable[Any]]
# may this user read this DAG (its id), or every DAG (None)?
Authorizer = Callable[[Any, str | None], bool]

# Airflow's run ids start with their run type; a run page's name is "<dag_id>__<run_id>"
_RUN_PAGE = re.compile(
    r"^/reports/quality/runs/(?P<dag>[\w.-]+?)__"
    r"(?:manual|scheduled|backfill|asset_triggered|dataset_triggered)__[^/]*\.html$"
)
# scripts, styles, images, fonts and requests of this origin only (Data Docs' assets are served
# from the site itself); inline scripts and styles are the pages' own; vega compiles its chart
# expressions with Function, hence 'unsafe-eval'
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'"
)


def dag_of(path: str) -> str | None:
    """The one DAG a page of this app belongs to, or None for a page of every DAG.

    >>> dag_of("/run/topk_stream/manual__2026-01-01T00:00:00+00:00")
    'topk_stream'
    >>> dag_of("/reports/quality/runs/join_stream__scheduled__1970-01-01T00_01_00_00_00.html")
    'join_stream'
    >>> dag_of("/reports/quality/runs/join_stream__scheduled__x/../../index.html") is None
    True
    """
    path = posixpath.normpath(path)  # what the static folders will serve, not what was asked
    if path.startswith("/run/"):
        return path.split("/")[2] or None
    match = _RUN_PAGE.match(path)
    return match.group("dag") if match else None


def _airflow_may_read(user: Any, dag_id: str | None) -> bool:
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    details = DagDetails(id=dag_id) if dag_id else None  # None: every DAG
    return bool(get_auth_manager().is_authorized_dag(method="GET", user=user, details=details))


async def _airflow_user(token: str | None) -> Any:
    """The user a JWT names, by Airflow's auth manager; raises HTTPException (401/403) otherwise."""
    from airflow.api_fastapi.core_api.security import resolve_user_from_token

    return await resolve_user_from_token(token)


def _login_url(next_url: str) -> str:
    from airflow.api_fastapi.app import get_auth_manager

    return str(get_auth_manager().get_url_login(next_url=next_url))


def create_app(
    resolve_user: Resolver = _airflow_user,
    login_url: Callable[[str], str] = _login_url,
    may_read: Authorizer = _airflow_may_read,
) -> Any:
    """The FastAPI app (built when the API server loads the plugin).

    ``resolve_user``, ``login_url`` and ``may_read`` are Airflow's by default; tests pass their own.
    """
    from fastapi import FastAPI, HTTPException, Request, Response
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
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
            user = await resolve_user(token)
        except HTTPException as e:
            return JSONResponse({"detail": e.detail}, status_code=e.status_code)
        path = request.scope["path"]
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        dag_id = dag_of(path)
        if not may_read(user, dag_id):
            what = f"DAG {dag_id}" if dag_id else "every DAG (this page covers them all)"
            return JSONResponse({"detail": f"Forbidden: needs read access to {what}"}, status_code=403)
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        return response

    @app.get("/")
    def index() -> RedirectResponse:
        return RedirectResponse(f"{URL_PREFIX}/reports/quality/index.html")

    @app.get("/live")
    def live() -> HTMLResponse:
        from datetime import UTC, datetime

        from outoforder_airflow import pace

        now = datetime.now(UTC)
        return HTMLResponse(pace.page(pace.from_airflow(now), now))

    @app.get("/run/{dag_id}/{run_id:path}")
    def run_report(dag_id: str, run_id: str) -> RedirectResponse:
        page = f"quality/runs/{safe_run_name(f'{dag_id}__{run_id}')}.html"
        if not (quality.reports_dir / page).is_file():
            page = "quality/index.html"  # the cumulative page: its own permission is checked there
        return RedirectResponse(f"{URL_PREFIX}/reports/{page}")

    app.mount(
        "/reports", StaticFiles(directory=quality.reports_dir, html=True, check_dir=False), name="reports"
    )
    app.mount("/docs", StaticFiles(directory=quality.docs_dir, html=True, check_dir=False), name="docs")
    return app
