"""The toy's Spark step: a DataFrame of arrivals to its counts per window."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def counts(arrivals: DataFrame, window_us: int) -> DataFrame:
    """(window, count) per tumbling window of ``event_ts`` (µs)."""
    return arrivals.groupBy(F.floor(F.col("event_ts") / window_us).alias("window")).count()
