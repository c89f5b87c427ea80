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

import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
from outoforder.quality.checkpoints import SuiteResult, conclude, run_checkpoint

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

# the built-in readers' streams; a declared source adds the ones it declares
KNOWN_STREAMS = ("ball", "team_a", "team_b", "referee", "devices", "taxi")


# what accounts for an ingested file's lines (the log's counts): their sum is its lines
ACCOUNTED = ("header_lines", "blank_lines", "rows_accepted", "rows_quarantined")


def accounting_frame(spark: SparkSession, settings: Settings, ingests: list[str] | None = None) -> DataFrame:
    """One row per ingested file (of ``ingests``, default all): logged counts next to the rows stored."""

    def mine(df: DataFrame) -> DataFrame:
        return df if ingests is None else df.where(F.col("ingest_id").isin(ingests))

    log = mine(delta.read(spark, INGEST_LOG, settings.lake_root).where(F.col("status") == "done"))
    stored = (
        mine(delta.read(spark, BRONZE, settings.lake_root))
        .groupBy("ingest_id")
        .agg(F.count("*").alias("bronze_rows"))
    )
    held = (
        mine(delta.read(spark, QUARANTINE, settings.lake_root))
        .groupBy("ingest_id")
        .agg(F.count("*").alias("quarantine_rows"))
    )
    return (
        log.join(stored, "ingest_id", "left")
        .join(held, "ingest_id", "left")
        .fillna(0, subset=["bronze_rows", "quarantine_rows"])
        .withColumn("lines_accounted", sum((F.col(c) for c in ACCOUNTED[1:]), F.col(ACCOUNTED[0])))
    )


# a slice of bronze up to this many rows is judged in pandas: one job to fetch it instead of one
# per expectation (the minute of a live stream's ingest is well below it)
PANDAS_ROWS = 200_000


def ingests_between(settings: Settings, since_us: int, until_us: int | None) -> dict[str, int]:
    """The ingests (files, Kafka batches) that finished in ``[since_us, until_us)``, with their rows.

    Read on the driver (delta-rs): the ingest log is a row per ingest.
    """
    from outoforder.io import deltars

    filters: list[tuple[str, str, Any]] = [("status", "=", "done"), ("ingested_at_us", ">=", since_us)]
    if until_us is not None:
        filters.append(("ingested_at_us", "<", until_us))
    done = deltars.read_table(
        INGEST_LOG, settings.lake_root, settings.storage, filters, columns=["ingest_id", "rows_accepted"]
    )
    if done is None:
        return {}
    return dict(
        zip(done.column("ingest_id").to_pylist(), done.column("rows_accepted").to_pylist(), strict=True)
    )


def accounting_on_driver(settings: Settings, ingests: list[str], arrivals: pd.DataFrame) -> pd.DataFrame:
    """:func:`accounting_frame` of ``ingests`` whose bronze rows are ``arrivals``, without Spark.

    The log's and the quarantine's rows of those ingests are read with delta-rs (a few each).
    """
    import pandas as pd

    from outoforder.io import deltars

    mine = [("ingest_id", "in", ingests)]
    logged = deltars.read_table(
        INGEST_LOG, settings.lake_root, settings.storage, [("status", "=", "done"), *mine]
    )
    held = deltars.read_table(QUARANTINE, settings.lake_root, settings.storage, mine, columns=["ingest_id"])
    frame = logged.to_pandas() if logged is not None else pd.DataFrame(columns=INGEST_LOG.schema.fieldNames())
    stored = arrivals["ingest_id"].value_counts()
    quarantined = (
        held.to_pandas()["ingest_id"].value_counts() if held is not None else pd.Series(dtype="int64")
    )
    frame["bronze_rows"] = frame["ingest_id"].map(stored).fillna(0).astype("int64")
    frame["quarantine_rows"] = frame["ingest_id"].map(quarantined).fillna(0).astype("int64")
    frame["lines_accounted"] = frame[list(ACCOUNTED)].sum(axis=1)
    return frame


def validate_bronze(
    spark: SparkSession,
    settings: Settings,
    fail: bool | None = None,
    run_name: str | None = None,
    since_us: int | None = None,
    until_us: int | None = None,
) -> list[SuiteResult]:
    """Run both bronze suites; raise :class:`QualityError` on failure when ``fail``.

    ``fail`` None follows ``quality.on_violation``. ``since_us`` limits both suites to the ingests
    that finished from then on (and before ``until_us``): a scheduled ingest checks what it added,
    at a cost that follows its batch, not the history. Uniqueness of the arrival sequence and of
    the content is then judged within those rows (their sequence numbers come from ordinals claimed
    apart from every other file's); the whole table is checked without ``since_us``.
    """
    bounds = list(settings.ingest.plausible_event_us.values())
    lo = min((b[0] for b in bounds), default=-(2**63))
    hi = max((b[1] for b in bounds), default=2**63 - 1)
    bronze = delta.read(spark, BRONZE, settings.lake_root)
    arrivals: DataFrame | pd.DataFrame = bronze
    ingests = None
    accounting = None
    if since_us is not None:
        rows = ingests_between(settings, since_us, until_us)
        if not rows:
            log.info("[quality] bronze: no ingest finished in the run's window: nothing to check")
            return []
        ingests = sorted(rows)
        bronze = bronze.where(F.col("ingest_id").isin(ingests))
        log.info("[quality] bronze: checking the %d ingests of the run's window", len(ingests))
        if sum(rows.values()) <= PANDAS_ROWS:  # the run's one Spark job: its rows, judged in pandas
            arrivals = bronze.toPandas()
            accounting = accounting_on_driver(settings, ingests, arrivals)
    results = run_checkpoint(
        settings,
        "bronze",
        # the accounting is a row per ingest: judged in pandas (one Spark job, not one per expectation)
        {
            "bronze_arrivals": arrivals,
            "bronze_accounting": (
                accounting
                if accounting is not None
                else accounting_frame(spark, settings, ingests).toPandas()
            ),
        },
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
