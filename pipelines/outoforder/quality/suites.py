"""Running Great Expectations suites on Spark DataFrames, and what every suite reports.

GX is called directly (an ephemeral context per suite): its Airflow provider stopped failing tasks
on failed expectations (USER_NEEDS.md #13), so the stage decides: raise
:class:`~outoforder.errors.QualityError` (the task fails) or only report (``warn``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from outoforder.errors import QualityError


@dataclass(frozen=True)
class SuiteResult:
    """Outcome of one suite: overall success and one line per expectation."""

    suite: str
    success: bool
    checks: list[tuple[str, bool, str]]

    def lines(self) -> list[str]:
        """A summary line, then one line per failed check (every check when ``verbose``)."""
        passed = sum(ok for _, ok, _ in self.checks)
        verdict = "PASSED" if self.success else "FAILED"
        head = f"[quality] {self.suite}: {verdict} ({passed}/{len(self.checks)} checks passed)"
        return [head, *(f"    FAIL {name} {detail}" for name, ok, detail in self.checks if not ok)]


def run_suite(name: str, df: DataFrame, expectations: list[Any]) -> SuiteResult:
    """Validate ``df`` against ``expectations`` in an ephemeral GX context."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_spark(name=f"{name}_source")
    asset = source.add_dataframe_asset(name=name)
    batch_def = asset.add_batch_definition_whole_dataframe(f"{name}_all")
    suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
    validation = context.validation_definitions.add(
        gx.ValidationDefinition(data=batch_def, suite=suite, name=f"{name}_validation")
    )
    result = validation.run(batch_parameters={"dataframe": df})
    checks = []
    for r in result.results:
        cfg = r.expectation_config
        label = "unnamed expectation"
        if cfg is not None:
            kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
            label = f"{cfg.type}({kwargs})"
        observed = r.result.get("observed_value", r.result.get("unexpected_count", ""))
        checks.append((label, bool(r.success), f"observed={observed}"))
    return SuiteResult(name, bool(result.success), checks)


def report(results: Sequence[SuiteResult], what: str, fail: bool) -> None:
    """Print every suite's lines; raise :class:`QualityError` when one failed and ``fail``."""
    for r in results:
        for line in r.lines():
            print(line, flush=True)
    failed = [r.suite for r in results if not r.success]
    if failed and fail:
        msg = f"{what} data quality failed: {', '.join(failed)}"
        raise QualityError(msg)
