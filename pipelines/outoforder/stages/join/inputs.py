"""The join's input: bronze rows as operator tuples (Spark), or a user's frame as a JoinInput (pandas).

The stream stage, the history its adaptation and checks read, and the evaluation share it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from outoforder.core.joins.query import JoinInput
from outoforder.errors import InputError
from outoforder.stages.join.spec import JoinJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def join_tuples(bronze: DataFrame, job: JoinJob) -> DataFrame:
    """Bronze rows of the joined streams as operator tuples.

    Columns: seq, side, ts, x, y, key, no_location, arrival_ts.
    """
    from pyspark.sql import functions as F

    df = bronze.where(F.col("stream").isin(*job.r_streams, *job.s_streams))
    key = F.xxhash64("key") if job.predicate == "key" else F.lit(0).cast("long")
    return df.select(
        F.col("arrival_seq").alias("seq"),
        F.when(F.col("stream").isin(*job.r_streams), 0).otherwise(1).cast("long").alias("side"),
        F.col("event_ts").alias("ts"),
        F.coalesce("x", F.lit(0.0)).alias("x"),
        F.coalesce("y", F.lit(0.0)).alias("y"),
        key.alias("key"),
        (F.col("x").isNull() | F.col("y").isNull() | F.isnan("x") | F.isnan("y")).alias("no_location"),
        "arrival_ts",
    )


def input_from_frame(
    df: pd.DataFrame, job: JoinJob, what: str = "the input", both_sides: bool = False
) -> JoinInput:
    """Arrivals (rows in arrival order) to a JoinInput; rows of other streams are ignored.

    Nothing is assumed: a distance join needs ``x`` and ``y`` (numbers) on every joined tuple and
    a key join a ``key`` column; a missing column, and with ``both_sides`` a side without rows,
    is an :class:`InputError` that names it (``what`` names the input in the message).
    """
    columns = ", ".join(map(str, df.columns))
    ts_col = "event_ts" if "event_ts" in df.columns else "ts"
    if ts_col not in df.columns:
        msg = f"{what} needs an event_ts (or ts) column in µs; its columns: {columns}"
        raise InputError(msg)
    if "side" in df.columns:
        side = df["side"].to_numpy(dtype=np.int64)
        keep = np.isin(side, (0, 1))
        names = ("side 0", "side 1")
    elif "stream" in df.columns:
        stream = df["stream"].astype(str)
        r, s = stream.isin(job.r_streams).to_numpy(), stream.isin(job.s_streams).to_numpy()
        side = np.where(r, 0, 1).astype(np.int64)
        keep = r | s
        names = (f"R ({','.join(job.r_streams)})", f"S ({','.join(job.s_streams)})")
    else:
        msg = f"{what} needs a side (0/1) or a stream column; its columns: {columns}"
        raise InputError(msg)
    need = {"distance": ("x", "y"), "key": ("key",)}[job.predicate]
    missing = [c for c in need if c not in df.columns]
    if missing:
        msg = (
            f"a {job.predicate} join needs the column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)}; {what} has: {columns}"
        )
        raise InputError(msg)
    sub = df[keep]
    n = len(sub)
    if both_sides:
        empty = [names[k] for k in (0, 1) if not (side[keep] == k).any()]
        if empty:
            seen = sorted(df["stream"].astype(str).unique())[:10] if "stream" in df.columns else ["0/1"]
            msg = f"{what} has no rows of {' or '.join(empty)}; its streams: {', '.join(seen)}"
            raise InputError(msg)
    # not numeric -> NaN, which a distance join then refuses with a count
    xs = pd.to_numeric(sub["x"], errors="coerce").to_numpy(np.float64) if "x" in sub else np.zeros(n)
    ys = pd.to_numeric(sub["y"], errors="coerce").to_numpy(np.float64) if "y" in sub else np.zeros(n)
    keys = pd.factorize(sub["key"].astype(str))[0].astype(np.int64) if "key" in sub else np.zeros(n, np.int64)
    if job.predicate == "distance" and (np.isnan(xs).any() or np.isnan(ys).any()):
        bad = int((np.isnan(xs) | np.isnan(ys)).sum())
        msg = (
            f"a distance join needs numeric x and y on every tuple of the joined streams; "
            f"{bad:,} rows of {what} lack one"
        )
        raise InputError(msg)
    ts = pd.to_numeric(sub[ts_col], errors="coerce").to_numpy(np.float64)
    bad_ts = ~np.isfinite(ts) | (ts != np.round(ts)) | (np.abs(ts) > 2**62)
    if bad_ts.any():
        first = sub[ts_col].to_numpy()[np.flatnonzero(bad_ts)[0]]
        msg = (
            f"{ts_col} must be an integer of µs on every tuple of the joined streams; {int(bad_ts.sum()):,} "
            f"rows of {what} are not (the first: {str(first)[:40]!r})"
        )
        raise InputError(msg)
    return JoinInput(side[keep], ts.astype(np.int64), xs, ys, keys)
