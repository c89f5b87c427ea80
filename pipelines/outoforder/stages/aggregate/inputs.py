"""The aggregates' input: a job's bronze rows as operator tuples (for the stream, its repair and checks)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.stages.aggregate.spec import AggJob


def agg_tuples(bronze: DataFrame, job: AggJob) -> DataFrame:
    """Bronze rows of the job's streams with a value, as operator tuples (seq, ts, v)."""
    return (
        of_streams(bronze, job)
        .where(valued())
        .select(F.col("arrival_seq").alias("seq"), F.col("event_ts").alias("ts"), F.col("value").alias("v"))
    )


def of_streams(bronze: DataFrame, job: AggJob) -> DataFrame:
    """Bronze rows of the job's streams (all when it names none)."""
    return bronze.where(F.col("stream").isin(*job.streams)) if job.streams else bronze


def valued() -> Column:
    """Rows with a value to aggregate (not null, not NaN)."""
    return F.col("value").isNotNull() & ~F.isnan("value")
