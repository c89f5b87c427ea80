"""Great Expectations checks of the bronze layer, run on Spark DataFrames.

Two suites:

- ``bronze_arrivals``: schema, non-null identity columns, globally unique ``arrival_seq``, no
  duplicate content within a source, plausible event times, known streams;
- ``bronze_accounting``: for every ingested file, lines = header + blank + accepted + quarantined,
  and the rows actually present in bronze and quarantine equal what the ingest log recorded.

A failed expectation raises :class:`~outoforder.errors.QualityError` (so the Airflow task fails)
unless ``quality.on_violation`` is ``warn`` (or ``fail=False``). The suites themselves are in
:mod:`outoforder.quality.suites`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
from outoforder.quality.checkpoints import SuiteResult, conclude, run_checkpoint

# the built-in readers' streams; a declared source adds the ones it declares
KNOWN_STREAMS = ("ball", "team_a", "team_b", "referee", "devices", "taxi")


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


def validate_bronze(
    spark: SparkSession, settings: Settings, fail: bool | None = None, run_name: str | None = None
) -> list[SuiteResult]:
    """Run both bronze suites; raise :class:`QualityError` on failure when ``fail``.

    ``fail`` None follows ``quality.on_violation``.
    """
    bounds = list(settings.ingest.plausible_event_us.values())
    lo = min((b[0] for b in bounds), default=-(2**63))
    hi = max((b[1] for b in bounds), default=2**63 - 1)
    arrivals = delta.read(spark, BRONZE, settings.lake_root)
    results = run_checkpoint(
        settings,
        "bronze",
        {"bronze_arrivals": arrivals, "bronze_accounting": accounting_frame(spark, settings)},
        source="all",
        job="bronze",
        run_name=run_name,
        columns=BRONZE.schema.fieldNames(),
        event_lo=lo,
        event_hi=hi,
        streams=(*KNOWN_STREAMS, *(s for d in settings.sources.values() for s in d.streams)),
    )
    conclude(results, "bronze", settings.quality.fails(fail))
    return results
