"""Extra links of every stage task: its run's quality report and the Data Docs site.

Both point at the reports web app that :mod:`outoforder_airflow.web` mounts on the API server
under :data:`URL_PREFIX`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.models.taskinstancekey import TaskInstanceKey

URL_PREFIX = "/outoforder"


def _base() -> str:
    # an API server behind a path prefix (api.base_url) serves the plugin's app under that prefix
    from urllib.parse import urlparse

    from airflow.configuration import conf

    path = urlparse(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")
    return f"{path}{URL_PREFIX}"


def run_report_url(dag_id: str, run_id: str) -> str:
    """The URL of a DAG run's quality report (the cumulative one until the run has written its own)."""
    return f"{_base()}/run/{quote(dag_id, safe='')}/{quote(run_id, safe='')}"


class QualityReportLink(BaseOperatorLink):
    """The data-quality report of the task's DAG run."""

    name = "Quality report"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The report page of the task's DAG run."""
        return run_report_url(ti_key.dag_id, ti_key.run_id)


class DataDocsLink(BaseOperatorLink):
    """The Great Expectations Data Docs site (every validation so far)."""

    name = "Data Docs"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        """The Data Docs index."""
        return f"{_base()}/docs/index.html"
