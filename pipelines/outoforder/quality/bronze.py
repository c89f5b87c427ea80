"""Great Expectations checks of the bronze layer, run on Spark DataFrames.

Two suites:

- ``bronze_arrivals``: schema, non-null identity columns, globally unique ``arrival_seq``, no
  duplicate content within a source, plausible event times, known streams;
- ``bronze_accounting``: for every ingested file, lines = header + blank + accepted + quarantined,
  and the rows actually present in bronze and quarantine equal what the ingest log recorded.

A failed expectation raises :class:`~outoforder.errors.QualityError` (so the Airflow task fails)
unless ``fail=False``. GX is called directly: its Airflow provider stopped failing tasks on failed
expectations (USER_NEEDS.md #13).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.errors import QualityError
from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE

KNOWN_STREAMS = ("ball", "team_a", "team_b", "referee", "devices", "taxi")


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


def accounting_frame(spark: SparkSession, settings: Settings) -> DataFrame:
    """One row per ingested file: logged counts next to the rows actually stored."""
    log = delta.read(spark, INGEST_LOG, settings.lake_root).where(F.col("status") == "done")
    stored = (
        delta.read(spark, BRONZE, settings.lake_root)
        .groupBy("ingest_id")
        .agg(F.count("*").alias("bronze_rows"))
    )
    held = (
        delta.read(spark, QUARANTINE, settings.lake_root)
        .groupBy("ingest_id")
        .agg(F.count("*").alias("quarantine_rows"))
    )
    return (
        log.join(stored, "ingest_id", "left")
        .join(held, "ingest_id", "left")
        .fillna(0, subset=["bronze_rows", "quarantine_rows"])
        .withColumn(
            "lines_accounted",
            F.col("header_lines") + F.col("blank_lines") + F.col("rows_accepted") + F.col("rows_quarantined"),
        )
    )


def _run(name: str, df: DataFrame, expectations: list[Any]) -> SuiteResult:
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


def validate_bronze(spark: SparkSession, settings: Settings, fail: bool = True) -> list[SuiteResult]:
    """Run both bronze suites; raise :class:`QualityError` on failure when ``fail``."""
    import great_expectations.expectations as gxe

    bounds = list(settings.ingest.plausible_event_us.values())
    lo = min((b[0] for b in bounds), default=-(2**63))
    hi = max((b[1] for b in bounds), default=2**63 - 1)
    arrivals = delta.read(spark, BRONZE, settings.lake_root)
    results = [
        _run(
            "bronze_arrivals",
            arrivals,
            [
                gxe.ExpectTableColumnsToMatchSet(column_set=BRONZE.schema.fieldNames(), exact_match=True),
                *[
                    gxe.ExpectColumnValuesToNotBeNull(column=c)
                    for c in ("source", "stream", "key", "event_ts", "arrival_seq", "row_hash", "ingest_id")
                ],
                gxe.ExpectColumnValuesToBeUnique(column="arrival_seq"),
                gxe.ExpectCompoundColumnsToBeUnique(column_list=["source", "row_hash"]),
                gxe.ExpectColumnValuesToBeBetween(column="event_ts", min_value=lo, max_value=hi),
                gxe.ExpectColumnValuesToBeInSet(column="stream", value_set=list(KNOWN_STREAMS)),
            ],
        ),
        _run(
            "bronze_accounting",
            accounting_frame(spark, settings),
            [
                # every physical line is a header, a blank, an accepted or a quarantined row
                gxe.ExpectColumnPairValuesToBeEqual(column_A="lines", column_B="lines_accounted"),
                gxe.ExpectColumnPairValuesToBeEqual(column_A="rows_accepted", column_B="bronze_rows"),
                gxe.ExpectColumnPairValuesToBeEqual(column_A="rows_quarantined", column_B="quarantine_rows"),
                gxe.ExpectColumnValuesToBeUnique(column="ingest_id"),
            ],
        ),
    ]
    for r in results:
        for line in r.lines():
            print(line, flush=True)
    failed = [r.suite for r in results if not r.success]
    if failed and fail:
        msg = f"bronze data quality failed: {', '.join(failed)}"
        raise QualityError(msg)
    return results
