"""Spark Structured Streaming's own stream-stream join, run on a join input as a baseline.

What a Spark user would write for the same query: both streams read as file streams (one file per
micro-batch of arrivals, in arrival order), each with ``withWatermark`` on its event time, and an
inner join with the time-range condition ``s.ts BETWEEN r.ts - w AND r.ts + w`` plus the
predicate. Spark needs an equality in a stream-stream join, so the distance predicate joins on
x-strips of width theta (R's rows are repeated for the strip on either side, then the exact
distance is tested); the key predicate joins on the key.

Spark drops rows older than the watermark on input and evicts state once the watermark passes,
so recall depends on the watermark delay; :func:`run_sss_join` reports the pairs produced, the
state rows per micro-batch (``numRowsTotal``; for the distance query R's rows count three times
there, so the distinct tuples held are reported from the state store reader as well), the rows
dropped by the watermark and the wall-clock time of the query.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, sort_pairs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SssRun:
    """One Structured Streaming run."""

    pairs: PairArray  # (r arrival index, s arrival index), sorted
    batch_of: IntArray  # micro-batch of each arrival
    state_rows: IntArray  # numRowsTotal after each micro-batch
    state_tuples: IntArray  # distinct tuples held, after the sampled micro-batches
    dropped_by_watermark: int
    seconds: float
    batches: int


def write_batches(inp: JoinInput, bounds: list[int], folder: Path) -> None:
    """One Parquet file per micro-batch and side, with increasing modification times."""
    if folder.exists():
        shutil.rmtree(folder)
    t0 = time.time() - len(bounds) - 10
    for side, name in ((0, "r"), (1, "s")):
        d = folder / name
        d.mkdir(parents=True)
        for b in range(len(bounds) - 1):
            lo, hi = bounds[b], bounds[b + 1]
            idx = np.arange(lo, hi)[inp.side[lo:hi] == side]
            frame = pd.DataFrame(
                {
                    "seq": idx.astype(np.int64),
                    "ts_us": inp.ts[idx],
                    "x": inp.x[idx],
                    "y": inp.y[idx],
                    "key": inp.key[idx],
                }
            )
            path = d / f"batch-{b:06d}.parquet"
            frame.to_parquet(path, index=False)
            # the file source takes files in modification-time order
            os.utime(path, (t0 + b, t0 + b))


def join_streams(
    r: DataFrame, s: DataFrame, query: JoinQuery, watermark_us: int, slots: bool = False
) -> DataFrame:
    """The stream-stream join of R's and S's streams (columns seq, ts_us, x, y, key): (r_seq, s_seq).

    Spark's stream-stream join matches on the equality only and applies the time range after, so
    a micro-batch of a minute meets a minute of state per key. ``slots`` adds an event-time slot
    2w wide to the equality (R's rows repeated for the two slots their ±w range meets), as a user
    would for long micro-batches.
    """
    from pyspark.sql import functions as F

    def timed(df: DataFrame) -> DataFrame:
        df = df.withColumn("ts", F.timestamp_micros("ts_us"))
        return df.withWatermark("ts", f"{max(watermark_us // 1000, 0)} milliseconds")

    r, s = timed(r), timed(s)
    if query.predicate == "distance":
        strip = query.theta if query.theta > 0 else 1.0
        r = r.withColumn("jk", F.explode(F.array(*[F.floor(F.col("x") / strip) + o for o in (-1, 0, 1)])))
        s = s.withColumn("jk", F.floor(F.col("x") / strip))
    else:
        r = r.withColumn("jk", F.col("key"))
        s = s.withColumn("jk", F.col("key"))
    if slots:
        width = max(2 * query.window_us, 1)
        near = F.sequence(
            F.floor((F.col("ts_us") - query.window_us) / width),
            F.floor((F.col("ts_us") + query.window_us) / width),
        )
        r = r.withColumn("slot", F.explode(near)).withColumn("jk", F.struct("jk", "slot"))
        s = s.withColumn("jk", F.struct("jk", F.floor(F.col("ts_us") / width).alias("slot")))
    r = r.select(*[F.col(c).alias(f"r_{c}") for c in ("seq", "ts", "x", "y", "jk")])
    s = s.select(*[F.col(c).alias(f"s_{c}") for c in ("seq", "ts", "x", "y", "jk")])
    w = f"INTERVAL {query.window_us} MICROSECONDS"
    cond = F.expr(f"r_jk = s_jk AND s_ts >= r_ts - {w} AND s_ts <= r_ts + {w}")
    if query.predicate == "distance":
        cond = cond & F.expr(f"(r_x - s_x) * (r_x - s_x) + (r_y - s_y) * (r_y - s_y) <= {query.theta**2!r}")
    return r.join(s, cond).select("r_seq", "s_seq")


def run_sss_join(
    spark: SparkSession,
    inp: JoinInput,
    query: JoinQuery,
    bounds: list[int],
    watermark_us: int,
    workdir: Path,
    samples: int = 12,
) -> SssRun:
    """Run the stream-stream join over the micro-batches ``[bounds[i], bounds[i + 1])``."""
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType

    schema = StructType(
        [
            StructField("seq", LongType()),
            StructField("ts_us", LongType()),
            StructField("x", DoubleType()),
            StructField("y", DoubleType()),
            StructField("key", LongType()),
        ]
    )
    data, out, ckpt = workdir / "in", workdir / "out", workdir / "checkpoint"
    for p in (out, ckpt):
        if p.exists():
            shutil.rmtree(p)
    if not (data / "r").exists() or len(list((data / "r").glob("*.parquet"))) != len(bounds) - 1:
        write_batches(inp, bounds, data)

    def stream(name: str) -> DataFrame:
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(data / name))

    joined = join_streams(stream("r"), stream("s"), query, watermark_us)
    # keep every batch's state version, so that the state reader can look back afterwards
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(len(bounds) + 1))
    t0 = time.monotonic()
    q = (
        joined.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    seconds = time.monotonic() - t0
    progress = [p for p in q.recentProgress if p.get("stateOperators")]
    state_rows = np.array([p["stateOperators"][0]["numRowsTotal"] for p in progress], dtype=np.int64)
    dropped = int(sum(p["stateOperators"][0].get("numRowsDroppedByWatermark", 0) for p in progress))
    sample = sorted({int(b) for b in np.linspace(0, len(progress) - 1, min(samples, len(progress)))})
    state_tuples = _state_tuples(spark, ckpt, sample) if query.predicate == "distance" else state_rows[sample]
    res = spark.read.parquet(str(out)).toPandas() if any(out.glob("*.parquet")) else pd.DataFrame()
    pairs = (
        sort_pairs(res[["r_seq", "s_seq"]].to_numpy(np.int64))
        if len(res)
        else np.zeros((0, 2), dtype=np.int64)
    )
    batch_of = np.zeros(len(inp), dtype=np.int64)
    for b in range(len(bounds) - 1):
        batch_of[bounds[b] : bounds[b + 1]] = b
    return SssRun(pairs, batch_of, state_rows, state_tuples, dropped, seconds, len(bounds) - 1)


def _state_tuples(spark: SparkSession, ckpt: Path, batches: list[int]) -> IntArray:
    """Distinct tuples in the join state after the given batches (the state store reader, per side)."""
    out = np.zeros(len(batches), dtype=np.int64)
    for i, b in enumerate(batches):
        total = 0
        for side in ("left", "right"):
            df = spark.read.format("statestore").option("batchId", b).option("joinSide", side).load(str(ckpt))
            col = "value.r_seq" if side == "left" else "value.s_seq"
            total += df.select(col).distinct().count()
        out[i] = total
    return out
