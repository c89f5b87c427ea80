"""Top-k per sliding window set at a time on Spark: exact, and as a cache of duration K emits it.

The DataFrame twins of :func:`outoforder.core.topk.reference.exact_topk` and
:func:`~outoforder.core.topk.reference.topk_at_cache` (the differential tests hold them equal).
Input columns: ``seq`` (arrival order, also the tuple id that breaks score ties), ``ts`` (event
time, µs) and ``score``. Output: one row per (window, rank) with ``window_id``, ``rank`` (1 =
best), ``seq``, ``ts`` and ``score``.

The cache form needs, per window, the arrival at which the stream's progress first reaches
``end + K``. Progress passes ``end(w) + K`` at the first arrival whose own event time does, so the
emission of window ``w`` is ``min(seq)`` over the tuples whose *last due window*
``floor((ts − K − size) / slide)`` is ``>= w``: a minimum per due window followed by a suffix
minimum over the (few) distinct due windows, without ordering the whole stream.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError
from outoforder.spark.windows import memberships


def _ranked(members: DataFrame, k: int) -> DataFrame:
    if k < 1:
        msg = f"k must be >= 1, got {k}"
        raise ConfigError(msg)
    order = Window.partitionBy("window_id").orderBy(F.col("score").desc(), F.col("seq").asc())
    return (
        members.withColumn("rank", F.row_number().over(order))
        .where(F.col("rank") <= k)
        .select("window_id", "rank", "seq", "ts", "score")
    )


def _members(df: DataFrame, windows: Windows) -> DataFrame:
    return df.select("seq", "ts", "score", F.explode(memberships(df, windows)).alias("window_id"))


def window_topk(df: DataFrame, windows: Windows, k: int) -> DataFrame:
    """The exact top-k of every window holding a tuple (score descending, then seq ascending)."""
    return _ranked(_members(df, windows), k)


def _due_window(ts: Column, windows: Windows, cache_us: int) -> Column:
    """The last window whose ``end + K`` an event time reaches."""
    return F.floor((ts - F.lit(cache_us + windows.size_us)) / F.lit(windows.slide_us)).cast("long")


def emission_seqs(df: DataFrame, windows: Windows, cache_us: int) -> DataFrame:
    """``(window_id, emit_seq)`` for every window holding a tuple: the arrival that emits it.

    ``emit_seq`` is null when the stream never passes the window (it is emitted at the end).
    """
    per_due = df.groupBy(_due_window(F.col("ts"), windows, cache_us).alias("key")).agg(
        F.min("seq").alias("first_seq")
    )
    ids = _members(df, windows).select(F.col("window_id").alias("key")).distinct()
    keys = per_due.withColumn("is_window", F.lit(False)).unionByName(
        ids.withColumn("first_seq", F.lit(None).cast("long")).withColumn("is_window", F.lit(True))
    )
    # min over due windows >= the key; RANGE frames include equal keys. One row per distinct
    # window or due value, so a global window is cheap.
    later = Window.orderBy(F.col("key").desc()).rangeBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        keys.select(
            F.col("key").alias("window_id"), F.min("first_seq").over(later).alias("emit_seq"), "is_window"
        )
        .where("is_window")
        .drop("is_window")
    )


def cache_topk(df: DataFrame, windows: Windows, k: int, cache_us: int) -> DataFrame:
    """What a cache of ``cache_us`` emits per window: the top-k of the members that arrived before.

    Windows emitted before any of their tuples arrived have no rows (the reference's empty list).
    """
    if cache_us < 0:
        msg = f"cache duration must be >= 0, got {cache_us}"
        raise ConfigError(msg)
    seen = (
        _members(df, windows)
        .join(emission_seqs(df, windows, cache_us), "window_id", "left")
        .where(F.col("emit_seq").isNull() | (F.col("seq") < F.col("emit_seq")))
    )
    return _ranked(seen.drop("emit_seq"), k)


def as_lists(rows: DataFrame) -> dict[int, list[int]]:
    """Collect a ranked frame into the reference's ``{window id: [seq, ...]}`` (small results only)."""
    out: dict[int, list[int]] = {}
    for r in rows.orderBy("window_id", "rank").collect():
        out.setdefault(int(r["window_id"]), []).append(int(r["seq"]))
    return out
