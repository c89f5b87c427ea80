"""QJoin set-at-a-time on Spark, one micro-batch of arrivals at a time.

Exactly :func:`outoforder.core.joins.qjoin.qjoin_set` (the differential tests hold them together),
computed with DataFrame operations only:

- per arrival, the stream maxima M_R, M_S, the progress T = min(M_R, M_S) and the horizons
  H_X = running max of (T - w - d_X) are window prefix maxima over the batch's arrival order,
  seeded with the state carried from the previous batch;
- each arrival probes the tuples still buffered from earlier batches plus the earlier arrivals of
  its own batch, through an equi-join on the predicate's buckets (the key, or the 3 x 3 cells of
  side theta around its position) and a band filter on event time; a candidate is emitted iff it
  is on the other stream, arrived earlier, and ``candidate.ts >= H_side(arrival)``;
- the new buffer keeps the tuples with ``ts >= H`` at the end of the batch.

A micro-batch boundary never changes a result: H is a prefix maximum and the carried state is
exactly what the tuple-at-a-time operator holds after the batch's last arrival.

Input columns: ``seq`` (arrival order), ``side`` (0 = R, 1 = S), ``ts`` (µs), ``x``, ``y``,
``key``, ``d_r`` and ``d_s`` (the retention in force at that arrival, µs).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from outoforder.core.joins.query import JoinQuery

TUPLE_SCHEMA = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("side", LongType(), False),
        StructField("ts", LongType(), False),
        StructField("x", DoubleType(), False),
        StructField("y", DoubleType(), False),
        StructField("key", LongType(), False),
    ]
)
TUPLE_COLS = [f.name for f in TUPLE_SCHEMA.fields]


@dataclass(frozen=True)
class QJoinState:
    """What QJoin carries from one micro-batch to the next (None = not seen yet)."""

    m_r: int | None
    m_s: int | None
    h_r: int | None
    h_s: int | None
    buffer: DataFrame

    @classmethod
    def empty(cls, spark: SparkSession) -> QJoinState:
        """The state before the first arrival."""
        return cls(None, None, None, None, spark.createDataFrame([], TUPLE_SCHEMA))


def _lit_long(value: int | None) -> Column:
    return F.lit(value).cast("long")


def _buckets(df: DataFrame, query: JoinQuery, probe: bool) -> DataFrame:
    """Bucket columns (b1, b2): the key, or theta-sized cells (probes explode to their 9 neighbours)."""
    if query.predicate == "key":
        return df.withColumn("b1", F.col("key")).withColumn("b2", F.lit(0).cast("long"))
    size = query.theta if query.theta > 0 else 1.0
    cx = F.floor(F.col("x") / F.lit(size)).cast("long")
    cy = F.floor(F.col("y") / F.lit(size)).cast("long")
    if not probe:
        return df.withColumn("b1", cx).withColumn("b2", cy)
    offsets = F.array(*[F.lit(o) for o in (-1, 0, 1)])
    return (
        df.withColumn("dx_", F.explode(offsets))
        .withColumn("dy_", F.explode(offsets))
        .withColumn("b1", cx + F.col("dx_"))
        .withColumn("b2", cy + F.col("dy_"))
        .drop("dx_", "dy_")
    )


def _predicate(query: JoinQuery) -> Column:
    band = F.abs(F.col("p.ts") - F.col("c.ts")) <= F.lit(query.window_us)
    if query.predicate == "key":
        return band & (F.col("p.key") == F.col("c.key"))
    dx = F.col("p.x") - F.col("c.x")
    dy = F.col("p.y") - F.col("c.y")
    return band & ((dx * dx + dy * dy) <= F.lit(query.theta * query.theta))


def qjoin_batch(batch: DataFrame, state: QJoinState, query: JoinQuery) -> tuple[DataFrame, QJoinState]:
    """Process one micro-batch: return its result pairs (columns r_seq, s_seq) and the new state."""
    prefix = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    m_r = F.greatest(_lit_long(state.m_r), F.max(F.when(F.col("side") == 0, F.col("ts"))).over(prefix))
    m_s = F.greatest(_lit_long(state.m_s), F.max(F.when(F.col("side") == 1, F.col("ts"))).over(prefix))
    arrivals = batch.withColumn("m_r", m_r).withColumn("m_s", m_s)
    t = F.when(F.col("m_r").isNotNull() & F.col("m_s").isNotNull(), F.least("m_r", "m_s"))
    arrivals = arrivals.withColumn("t", t)
    for side, d, carry in (("h_r", "d_r", state.h_r), ("h_s", "d_s", state.h_s)):
        raw = F.col("t") - F.lit(query.window_us) - F.col(d)
        arrivals = arrivals.withColumn(side, F.greatest(_lit_long(carry), F.max(raw).over(prefix)))
    arrivals = arrivals.localCheckpoint()

    candidates = state.buffer.select(*TUPLE_COLS).unionByName(arrivals.select(*TUPLE_COLS))
    probe = _buckets(arrivals.select(*TUPLE_COLS, "h_r", "h_s"), query, probe=True).alias("p")
    cand = _buckets(candidates, query, probe=False).alias("c")
    horizon = F.when(F.col("c.side") == 0, F.col("p.h_r")).otherwise(F.col("p.h_s"))
    joined = probe.join(
        cand,
        (F.col("p.b1") == F.col("c.b1"))
        & (F.col("p.b2") == F.col("c.b2"))
        & (F.col("p.side") != F.col("c.side"))
        & (F.col("c.seq") < F.col("p.seq")),
    ).where(_predicate(query) & (horizon.isNull() | (F.col("c.ts") >= horizon)))
    pairs = joined.select(
        F.when(F.col("p.side") == 0, F.col("p.seq")).otherwise(F.col("c.seq")).alias("r_seq"),
        F.when(F.col("p.side") == 1, F.col("p.seq")).otherwise(F.col("c.seq")).alias("s_seq"),
        F.col("p.seq").alias("emitted_at"),
    )

    last = arrivals.agg(F.max("m_r"), F.max("m_s"), F.max("h_r"), F.max("h_s")).first()
    assert last is not None
    h_r, h_s = last[2], last[3]
    keep = F.when(F.col("side") == 0, F.lit(h_r).isNull() | (F.col("ts") >= F.lit(h_r))).otherwise(
        F.lit(h_s).isNull() | (F.col("ts") >= F.lit(h_s))
    )
    buffer = candidates.where(keep).localCheckpoint()
    return pairs, QJoinState(last[0], last[1], h_r, h_s, buffer)
