"""Running a checkpoint: the suites of :mod:`~outoforder.quality.suites` over frames a stage prepared.

GX is called directly: its Airflow provider stopped failing tasks on failed expectations (the
provider's issue #195), so :func:`conclude` decides, from ``quality.on_violation``: raise
:class:`~outoforder.errors.QualityError` (the task fails) or only report (``warn``).

Every result is kept: GX stores it as JSON under ``<reports_dir>/gx/validations`` and renders it
into the Data Docs site at ``quality.docs_dir`` (the index lists every run so far); one row per
suite goes to the Delta table ``gold/quality_runs`` for the quality report. Each suite runs as a
GX checkpoint of its own, because a checkpoint passes one set of batch parameters (one frame) to
all its validation definitions and every suite here judges a different frame.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import CheckFailed, ConfigError, QualityError
from outoforder.quality import docs_assets
from outoforder.quality.suites import CHECKPOINTS, expectations, out_of_reach

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class SuiteResult:
    """Outcome of one suite: overall success, one line per expectation, its Data Docs page."""

    suite: str
    success: bool
    checks: list[tuple[str, bool, str]]
    docs_page: str | None = field(default=None, compare=False)

    def lines(self) -> list[str]:
        """A summary line, then one line per failed check."""
        passed = sum(ok for _, ok, _ in self.checks)
        verdict = "PASSED" if self.success else "FAILED"
        head = f"[quality] {self.suite}: {verdict} ({passed}/{len(self.checks)} checks passed)"
        return [head, *(f"    FAIL {name} {detail}" for name, ok, detail in self.checks if not ok)]


def safe_run_name(name: str) -> str:
    """A run name usable as a folder of the Data Docs site (Airflow run ids hold ``:`` and ``+``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "run"


def _context(settings: Settings, results_dir: Path) -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    def on_disk(folder: Path) -> dict[str, str]:
        return {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(folder)}

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
        data_docs_sites={
            "local_site": {
                "class_name": "SiteBuilder",
                "show_how_to_buttons": False,
                "store_backend": on_disk(settings.quality.docs_dir),
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            }
        },
    )
    # an ephemeral context with its results on disk: no great_expectations.yml is written, so
    # tasks validating at the same time cannot corrupt a shared project file
    config.stores["validation_results_store"] = {
        "class_name": "ValidationResultsStore",
        "store_backend": on_disk(results_dir),
    }
    context = gx.get_context(project_config=config, mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return context


def _checks(result: Any) -> list[tuple[str, bool, str]]:
    checks = []
    for r in result.results:
        cfg = r.expectation_config
        label = "unnamed expectation"
        if cfg is not None:
            kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
            label = f"{cfg.type}({kwargs})"
        observed = r.result.get("observed_value", r.result.get("unexpected_count", ""))
        checks.append((label, bool(r.success), f"observed={observed}"))
    return checks


def run_checkpoint(
    settings: Settings,
    checkpoint: str,
    frames: Mapping[str, DataFrame | pd.DataFrame],
    *,
    source: str,
    job: str,
    run_name: str | None = None,
    **params: Any,
) -> list[SuiteResult]:
    """Validate each frame against its suite of ``checkpoint``; store results, docs and run rows.

    ``frames`` maps suite names to the frames they judge; a suite of the checkpoint left out is not
    run (e.g. no accuracy verdict before the first window closes). ``params`` carry the targets.

    A frame is a Spark DataFrame, or a pandas one when it is small by construction (one row per
    period or window the check judged): GX then computes its metrics in the driver instead of
    running a Spark job per metric, about two seconds a suite.
    """
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

    suites = {s.name for s in CHECKPOINTS.get(checkpoint, [])}
    if not suites:
        msg = f"unknown checkpoint {checkpoint!r} (known: {', '.join(CHECKPOINTS)})"
        raise ConfigError(msg)
    unknown = sorted(set(frames) - suites)
    if unknown:
        have = ", ".join(sorted(suites))
        msg = f"checkpoint {checkpoint!r} has no suite {', '.join(unknown)} (it has {have})"
        raise ConfigError(msg)
    now = datetime.now(UTC)
    name = safe_run_name(run_name or f"{job}-{now:%Y%m%dT%H%M%S}")
    results_dir = settings.quality.reports_dir / "gx" / "validations"
    try:
        context = _context(settings, results_dir)
        run_id = RunIdentifier(run_name=name, run_time=now)
        out = []
        rendered: list[Any] = []
        for suite_name, frame in frames.items():
            if _session(frame) is not None:
                # not persisted: GX would cache the frame in the server's cache, shared by every
                # session and never released, and every later write to a table under it re-plans
                # each cached frame (on the shared server, a growing cost per write, run after run)
                source_ = context.data_sources.add_spark(name=f"{suite_name}_source", persist=False)
            else:
                source_ = context.data_sources.add_pandas(name=f"{suite_name}_source")
            batch = source_.add_dataframe_asset(name=suite_name).add_batch_definition_whole_dataframe("all")
            suite = context.suites.add(
                gx.ExpectationSuite(name=suite_name, expectations=expectations(suite_name, **params))
            )
            definition = context.validation_definitions.add(
                gx.ValidationDefinition(data=batch, suite=suite, name=f"{suite_name}_validation")
            )
            cp = context.checkpoints.add(
                gx.Checkpoint(name=f"{checkpoint}.{suite_name}", validation_definitions=[definition])
            )
            result = cp.run(batch_parameters={"dataframe": frame}, run_id=run_id)
            ((result_id, validation),) = result.run_results.items()
            page = None
            if settings.quality.build_docs:
                page = "/".join(["validations", *result_id.to_tuple()]) + ".html"
                rendered += [result_id, ExpectationSuiteIdentifier(name=suite_name)]
            out.append(SuiteResult(suite_name, bool(validation.success), _checks(validation), page))
        built = time.time()
        if rendered:  # one site update for the run's suites (each takes about a second)
            context.build_data_docs(resource_identifiers=rendered)
    except (ConfigError, QualityError):
        raise
    except Exception as e:  # GX raises many unrelated types; the context is what helps
        msg = f"Great Expectations failed while running checkpoint {checkpoint!r} for {source} ({job}): {e}"
        raise QualityError(msg) from e
    if rendered:
        try:  # the pages' scripts from the site itself; the verdicts stand whatever happens here
            docs_assets.localize(settings.quality.docs_dir, since=built - 1)
        except OSError as e:
            log.warning("Data Docs: the pages keep their CDN addresses (%s)", e)
    if frames:
        _record(settings, checkpoint, source, job, name, out)
    return out


def _session(frame: object) -> SparkSession | None:
    return getattr(frame, "sparkSession", None)


def _record(
    settings: Settings,
    checkpoint: str,
    source: str,
    job: str,
    run_name: str,
    results: Sequence[SuiteResult],
) -> None:
    """The run's verdicts in ``gold/quality_runs``, written on the driver (no Spark job)."""
    from outoforder.io import deltars
    from outoforder.io.tables import QUALITY_RUNS

    at = int(time.time() * 1e6)
    rows = [
        (
            checkpoint,
            r.suite,
            source,
            job,
            run_name,
            r.success,
            sum(ok for _, ok, _ in r.checks),
            len(r.checks),
            [f"{label} {detail}" for label, ok, detail in r.checks if not ok],
            settings.quality.on_violation,
            r.docs_page,
            at,
        )
        for r in results
    ]
    # a re-run of the same run replaces its rows (idempotent); other runs are history
    deltars.replace_rows(
        QUALITY_RUNS,
        settings.lake_root,
        settings.storage,
        rows,
        {"checkpoint": checkpoint, "source": source, "job": job, "run_name": run_name},
    )


def failures(results: Sequence[SuiteResult]) -> list[str]:
    """The suites that failed, but those a feasibility suite explains (see :func:`conclude`)."""
    warned = out_of_reach(r.suite for r in results if not r.success)
    return [r.suite for r in results if not r.success and r.suite not in warned]


def publish(
    results: Sequence[SuiteResult], table: str, measure: str, items: int, met: int, **more: Any
) -> None:
    """A check's figures for the asset event of the table it judged (:mod:`outoforder.io.figures`).

    ``items`` periods or windows judged by the run, ``met`` of them met the target; ``passed`` is
    the run's verdict (a failure the bound explains passes); ``more``: the measure's own figures.
    """
    from outoforder.io import figures

    figures.record(
        table, judged=measure, items=int(items), met=int(met),
        share_met=round(met / items, 6) if items else None, passed=not failures(results),
        suites={r.suite: r.success for r in results}, **more,
    )  # fmt: skip


def conclude(results: Sequence[SuiteResult], what: str, fail: bool) -> None:
    """Log every suite's lines; raise :class:`QualityError` when one failed and ``fail``.

    A failure a feasibility suite explains (:func:`~outoforder.quality.suites.out_of_reach`: the
    target was out of reach under the user's bound) is logged as a warning and never raises.
    """
    warned = out_of_reach(r.suite for r in results if not r.success)
    for r in results:
        for line in r.lines():
            if r.suite in warned:
                log.warning("%s (out of reach under the bound: a warning)", line)
            else:
                log.info("%s", line)
    failed = failures(results)
    if failed and fail:
        msg = f"{what} data quality failed: {', '.join(failed)}"
        raise CheckFailed(msg)
