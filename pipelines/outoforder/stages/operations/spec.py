"""The operations stages: the main job, reports, storage and maintenance.

Standard library only (see :mod:`outoforder.stages.registry`).
"""

from __future__ import annotations

from outoforder.stages.options import arg
from outoforder.stages.registry import Operator, Stage

_C = "outoforder.stages.operations.commands"

OPERATOR = Operator(
    name="operations",
    summary="the main job, the quality report, storage and maintenance",
    stages=(
        Stage(
            "demo",
            "the main job: every step of every operator once, on the embedded default",
            f"{_C}:demo",
            args=(
                arg("--preset", help="disorder preset for the synthetic replay"),
                arg("--steps", help="only these steps, comma-separated (the main job's steps)"),
                arg("--run-name", help="names the steps' validations (Data Docs, the quality report)"),
            ),
        ),
        Stage(
            "report",
            "the data-quality report (static HTML)",
            f"{_C}:report",
            args=(
                arg("--run-name", help="also write this run's page (its validations and interval)"),
                arg("--start", help="the run's arrival-time interval start (µs or ISO 8601)"),
                arg("--end", help="the run's interval end, exclusive"),
                arg("--headline", action="store_true", help="also print the targets and baselines tables"),
                arg(
                    "--sections",
                    help="the run's page shows only these (comma-separated: join, aggregate, topk, theta, "
                    "inputs)",
                ),
            ),
        ),
        Stage(
            "landing",
            "files waiting in the landing bucket",
            f"{_C}:landing",
            args=(arg("--json", action="store_true", help="one JSON list (the Airflow sensor reads it)"),),
        ),
        Stage(
            "buckets",
            "create object-store buckets",
            f"{_C}:buckets",
            args=(
                arg("names", nargs="+"),
                arg(
                    "--pipeline-user",
                    action="store_true",
                    help="also create the pipeline's own user, allowed these buckets only (its keys from "
                    "OOO_S3_PIPELINE_ACCESS_KEY and OOO_S3_PIPELINE_SECRET_KEY; the settings' keys are the "
                    "root's)",
                ),
            ),
        ),
        Stage(
            "publish",
            "upload the reports and Data Docs to a bucket",
            f"{_C}:publish",
            args=(arg("--to", help="s3a://bucket/prefix (default: storage.publish_uri)"),),
        ),
        Stage(
            "checksum",
            "rows and a content digest per table",
            f"{_C}:checksum",
            args=(
                arg("--tables", nargs="*", help="table names, e.g. gold/join_results (default: all)"),
                arg("--json", action="store_true", help="one line: CHECKSUMS{...}"),
            ),
        ),
        Stage(
            "maintain",
            "OPTIMIZE and VACUUM the tables",
            f"{_C}:maintain",
            args=(
                arg("--tables", nargs="*", help="table names (default: all)"),
                arg("--no-optimize", action="store_true", help="only VACUUM"),
            ),
        ),
        Stage(
            "stages",
            "list every stage: its operator, job, tables read and written",
            f"{_C}:stages",
            args=(
                arg("--markdown", action="store_true", help="as the Markdown table of docs/architecture.md"),
            ),
        ),
        Stage(
            "presets",
            "list disorder presets",
            f"{_C}:presets",
            args=(arg("--calibrate", action="store_true", help="re-run the calibration (slow)"),),
        ),
    ),
)
