"""Registers the project's Airflow extensions (see ``outoforder_airflow``).

- the stage operator's extra links (Quality report, Data Docs);
- the reports web app on the API server under ``/outoforder``;
- a "Quality report", a "Live pace" and a "Data Docs" entry in the UI's navigation, and a
  "Quality report" tab on every DAG run page.
"""

from __future__ import annotations

from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin
from outoforder_airflow.links import URL_PREFIX, DataDocsLink, QualityReportLink
from outoforder_airflow.web import create_app


class OutOfOrderPlugin(AirflowPlugin):
    """The outoforder pipeline in Airflow."""

    name = "outoforder"
    operator_extra_links: ClassVar[list[Any]] = [QualityReportLink(), DataDocsLink()]
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": create_app(), "url_prefix": URL_PREFIX, "name": "outoforder reports"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {
            "name": "Quality report",
            "href": f"{URL_PREFIX}/reports/quality/index.html",
            "destination": "nav",
            "category": "browse",
            "url_route": "outoforder-quality",
        },
        {
            "name": "Live pace",
            "href": f"{URL_PREFIX}/live",
            "destination": "nav",
            "category": "browse",
            "url_route": "outoforder-live",
        },
        {
            "name": "Data Docs",
            "href": f"{URL_PREFIX}/docs/index.html",
            "destination": "nav",
            "category": "browse",
            "url_route": "outoforder-data-docs",
        },
        {
            "name": "Quality report",
            "href": f"{URL_PREFIX}/run/{{DAG_ID}}/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "outoforder-run-quality",
        },
    ]
