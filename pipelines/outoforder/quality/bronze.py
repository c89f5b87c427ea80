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

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
from outoforder.quality.suites import SuiteResult, report, run_suite

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


def validate_bronze(spark: SparkSession, settings: Settings, fail: bool = True) -> list[SuiteResult]:
    """Run both bronze suites; raise :class:`QualityError` on failure when ``fail``."""
    import great_expectations.expectations as gxe

    bounds = list(settings.ingest.plausible_event_us.values())
    lo = min((b[0] for b in bounds), default=-(2**63))
    hi = max((b[1] for b in bounds), default=2**63 - 1)
    arrivals = delta.read(spark, BRONZE, settings.lake_root)
    results = [
        run_suite(
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
        run_suite(
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
    report(results, "bronze", fail)
    return results
