"""θ-joins of a user's own files (``theta-join --file a.csv --file b.parquet …``), one stream per file.

Each file (CSV with a header, or Parquet) is one stream; its row number is the tuple's id and the
named column the join value. A value that does not parse as a number is excluded from the join
and counted per file, never silently taken as something else.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from outoforder.errors import ConfigError, InputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FilesJoinSummary:
    """What a join of files produced."""

    result_rows: int
    excluded: dict[str, int]  # file name -> rows without a numeric join value
    method: str
    seconds: float
    out: str | None


def read_user_frames(spark: SparkSession, paths: list[Path], column: str) -> list[DataFrame]:
    """One stream per file: its row number (``s{i}_seq``) and the join column as a double (``s{i}_v``).

    Row numbers are each row's number within its partition plus the rows of the partitions before
    it (a count per partition, then offsets): no task ever holds the whole file. The values are
    checkpointed first, so both passes see the same partitions.
    """
    from pyspark.sql import functions as F

    frames = []
    for i, path in enumerate(paths):
        if not path.is_file():
            msg = f"no such file: {path}"
            raise InputError(msg)
        parquet = path.suffix == ".parquet"
        df = spark.read.parquet(str(path)) if parquet else spark.read.option("header", True).csv(str(path))
        if column not in df.columns:
            msg = f"{path} has no column {column!r} (columns: {', '.join(df.columns)})"
            raise InputError(msg)
        # a value that does not parse becomes null: excluded from the join and counted
        values = (
            df.select(F.col(column).try_cast("double").alias(f"s{i}_v"))
            .withColumn("_part", F.spark_partition_id())
            .withColumn("_id", F.monotonically_increasing_id())
            .localCheckpoint()
        )
        sizes = sorted((int(r[0]), int(r[1])) for r in values.groupBy("_part").count().collect())
        before, offsets = 0, []
        for part, n in sizes:
            offsets.append((part, before))
            before += n
        offset = spark.createDataFrame(offsets, "_part int, _offset long")
        # monotonically_increasing_id: the partition in the upper 31 bits, the row's number in it below
        within = F.col("_id") - F.shiftleft(F.col("_part").cast("long"), 33)
        frames.append(
            values.join(F.broadcast(offset), "_part").select(
                (F.col("_offset") + within).alias(f"s{i}_seq"), f"s{i}_v"
            )
        )
    return frames


def join_files(
    spark: SparkSession,
    paths: list[Path],
    column: str,
    predicates: list[str],
    method: str = "fast",
    partitions: int = 8,
    out: str | None = None,
) -> FilesJoinSummary:
    """The chained θ-join of the files' ``column`` (``predicates`` between neighbours); rows to ``out``."""
    from pyspark.sql import functions as F

    from outoforder.core.theta.plan import Theta
    from outoforder.spark.theta import multiway_join

    thetas = [Theta.parse(p) for p in predicates]
    if len(paths) < 2 or len(thetas) != len(paths) - 1:
        msg = f"{len(paths)} files need at least two files and {len(paths) - 1} predicates, got {len(thetas)}"
        raise ConfigError(msg)
    frames = read_user_frames(spark, paths, column)
    nulls = [f.where(F.col(f"s{i}_v").isNull() | F.isnan(f"s{i}_v")).count() for i, f in enumerate(frames)]
    t0 = time.monotonic()
    res = multiway_join(frames, [f"s{i}_v" for i in range(len(paths))], thetas, method, partitions)
    try:
        rows = res.rows.select(
            *[F.col(f"s{i}_seq").alias(f"{p.stem}_row") for i, p in enumerate(paths)],
            *[F.col(f"s{i}_v").alias(f"{p.stem}_{column}") for i, p in enumerate(paths)],
        )
        if out:
            rows.write.mode("overwrite").parquet(out)
            n = spark.read.parquet(out).count()
        else:
            n = rows.count()
    finally:
        res.release()
    excluded = {p.name: z for p, z in zip(paths, nulls, strict=True) if z}
    for name, z in excluded.items():
        log.info("[theta] %s: %d rows with a null, NaN or non-numeric %s excluded", name, z, column)
    summary = FilesJoinSummary(n, excluded, method, time.monotonic() - t0, out)
    where = f", written to {out} (Parquet)" if out else ""
    log.info("[theta] %d result rows in %.1f s (%s)%s", n, summary.seconds, method, where)
    return summary
