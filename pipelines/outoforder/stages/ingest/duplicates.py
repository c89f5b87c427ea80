"""Duplicate rows across a task's view: the hash pass, its suspects, and which copy is kept.

Step 4 of :mod:`outoforder.stages.ingest.files` and the decision of step 6: where a source has
several parts or files in one ingest, or rows from an earlier one, every line that could be
accepted is hashed first; a hash seen twice, or already in bronze, is a suspect, and of a suspect's
rows the first in arrival order is kept.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.io import delta
from outoforder.io.tables import BRONZE
from outoforder.sources.parsing import ACROSS_FILES, WITHIN_FILE
from outoforder.stages.ingest import tasks
from outoforder.stages.ingest.plan import PlannedFile, arrow_df, ingest_log, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def sources_with_history(settings: Settings, files: list[PlannedFile]) -> set[str]:
    """Sources for which an earlier ingest (a file not among ``files``) claimed an ordinal."""
    ids = {f.ingest_id for f in files}
    sources = sorted({f.spec.source for f in files})
    rows = ingest_log(settings, [("source", "in", sources)], ["source", "ingest_id"])
    return {r["source"] for r in rows if r["ingest_id"] not in ids}


def suspects_of(
    spark: SparkSession,
    settings: Settings,
    files: list[PlannedFile],
    rows: list[dict[str, Any]],
    history: set[str],
) -> DataFrame | None:
    """The hash pass over the sources that need it; sets every part's ``first_line`` and ``local``.

    Returns the suspects (``source``, ``row_hash``, ``in_bronze``): hashes of lines that could be
    accepted which this ingest holds twice, or which bronze holds from an earlier ingest; None
    when no source needs the pass. Only hash blobs and suspects cross the network.
    """
    from pyspark.sql import functions as F

    by_source: dict[str, list[PlannedFile]] = defaultdict(list)
    for f in files:
        by_source[f.spec.source].append(f)
    needs = {s for s, fs in by_source.items() if len(fs) > 1 or len(fs[0].parts) > 1 or s in history}
    for f in files:
        for p in f.parts:
            rows[p]["local"] = f.spec.source not in needs
    scan = [r for r in rows if not r["local"]]
    if not scan:
        return None
    storage = settings.storage
    t0 = time.monotonic()
    hashed = (
        arrow_df(spark, scan, tasks.PART_FIELDS)
        .mapInArrow(lambda it: tasks.hash_pass(it, storage), spark_schema(tasks.HASH_SCHEMA))
        .localCheckpoint()
    )
    lines = {
        int(r["part"]): int(r["lines"]) for r in hashed.where("bucket < 0").select("part", "lines").collect()
    }
    for f in files:
        first = 1
        for p in f.parts:
            rows[p]["first_line"] = first
            first += lines.get(p, 0)
    source_of = spark.createDataFrame([(r["part"], r["source"]) for r in scan], "part long, source string")
    blobs = (
        hashed.where("bucket >= 0")
        .join(F.broadcast(source_of), "part")
        .select("source", "bucket", "hashes", F.lit("new").alias("origin"))
    )
    earlier = sorted(history & needs)
    if earlier:
        ids = [f.ingest_id for f in files]
        bronze = (
            delta.read(spark, BRONZE, settings.lake_root)
            .where(F.col("source").isin(earlier) & ~F.col("ingest_id").isin(ids))
            .select("source", "row_hash")
            .mapInArrow(tasks.bronze_buckets, "source string, bucket long, hashes binary")
        )
        blobs = blobs.unionByName(bronze.withColumn("origin", F.lit("bronze")))
    suspects = (
        blobs.repartition("source", "bucket")
        .mapInArrow(tasks.find_suspects, spark_schema(tasks.SUSPECT_SCHEMA))
        .localCheckpoint()
    )
    log.info("[ingest] hash pass over %d parts: %s lines, %.1f s", len(scan), f"{sum(lines.values()):,}",
             time.monotonic() - t0)  # fmt: skip
    return suspects


def decide_duplicates(rows: DataFrame, suspects: DataFrame, ordinal_of: DataFrame) -> DataFrame:
    """Suspect rows with ``keep`` and, for the others, the duplicate's detail and quarantined raw line."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    s = rows.join(F.broadcast(ordinal_of), "file_idx").join(suspects, ["source", "row_hash"], "left")
    same = Window.partitionBy("source", "row_hash", "file_idx")
    everywhere = Window.partitionBy("source", "row_hash")
    s = s.withColumn("earlier_line", F.col("arrival_seq") > F.min("arrival_seq").over(same))
    s = s.withColumn(
        "earlier_file",
        F.coalesce(F.col("in_bronze"), F.lit(False)) | (F.col("ordinal") > F.min("ordinal").over(everywhere)),
    )
    return s.select(
        "*",
        (~F.col("earlier_line") & ~F.col("earlier_file")).alias("keep"),
        F.when(F.col("earlier_line"), F.lit(WITHIN_FILE)).otherwise(F.lit(ACROSS_FILES)).alias("dup_detail"),
        F.when(F.col("earlier_line"), F.substring("raw_line", 1, 4096))
        .otherwise(F.col("raw_line"))
        .alias("dup_raw"),
    )
