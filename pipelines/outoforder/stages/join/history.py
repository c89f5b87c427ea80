"""What the stream join has seen and produced: the history that adaptation, repair and the checks judge.

The arrivals of the job's streams since its first interval (or the last span of arrival time) are
read in arrival order, joined exactly (the truth), and matched against the pairs the stream stage
MERGEd into ``gold/join_results``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from outoforder.config import Settings
from outoforder.core.joins.query import JoinInput, PairArray, exact_join
from outoforder.errors import StateError
from outoforder.io.tables import JOIN_RESULTS, JOIN_STATE
from outoforder.stages import interval
from outoforder.stages.interval import where_job
from outoforder.stages.join.evaluate import input_from_frame
from outoforder.stages.join.spec import JoinJob

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class JudgedHistory:
    """The history as a join input, its exact join, which true pairs the stream produced, arrival_seqs."""

    inp: JoinInput
    truth: PairArray
    produced: npt.NDArray[np.bool_]
    seqs: npt.NDArray[np.int64]


def arrivals(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    span_us: int | None = None,
) -> pd.DataFrame:
    """The arrivals the job has seen before ``until_us``, in arrival order.

    All of them since its first interval, or only the last ``span_us`` of arrival time.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    jid = job.job_id()
    first = interval.first_start(spark, settings, JOIN_STATE, source, jid)
    if first is None:
        msg = f"the stream join of {source} ({jid}) has not run yet: nothing to adapt or check"
        raise StateError(msg)
    lo = max(first, until_us - (span_us or until_us))
    return (
        delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source, arrival_ts_range=(lo, until_us))
        .where(F.col("stream").isin(*job.r_streams, *job.s_streams))
        .select("arrival_seq", "stream", "event_ts", "x", "y", "key")
        .orderBy("arrival_seq")
        .toPandas()
    )


def produced_mask(
    spark: SparkSession,
    settings: Settings,
    source: str,
    jid: str,
    seqs: npt.NDArray[np.int64],
    truth: PairArray,
) -> npt.NDArray[np.bool_]:
    """Which true pairs (arrival indices) the stream stage produced."""
    from outoforder.io import delta

    got = (
        delta.read(spark, JOIN_RESULTS, settings.lake_root)
        .where(where_job(source, jid))
        .select("r_seq", "s_seq")
        .toPandas()
    )
    if truth.size == 0:
        return np.zeros(0, dtype=bool)
    base = int(seqs.size) + 1
    pos_r = np.searchsorted(seqs, got["r_seq"].to_numpy(np.int64))
    pos_s = np.searchsorted(seqs, got["s_seq"].to_numpy(np.int64))
    inside = (pos_r < seqs.size) & (pos_s < seqs.size)
    inside[inside] &= (seqs[pos_r[inside]] == got["r_seq"].to_numpy()[inside]) & (
        seqs[pos_s[inside]] == got["s_seq"].to_numpy()[inside]
    )
    codes = pos_r[inside] * base + pos_s[inside]
    return np.isin(truth[:, 0] * base + truth[:, 1], codes)


def judged(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    span_us: int | None = None,
) -> JudgedHistory | None:
    """The history judged against the exact join (None when nothing arrived in it)."""
    pdf = arrivals(spark, settings, source, job, until_us, span_us)
    if pdf.empty:
        return None
    inp = input_from_frame(pdf, job, f"the history of {source}")
    truth = exact_join(inp, job.query())
    seqs = pdf["arrival_seq"].to_numpy(np.int64)
    return JudgedHistory(inp, truth, produced_mask(spark, settings, source, job.job_id(), seqs, truth), seqs)
