"""``join-repair``: add the true pairs the stream join missed, so join recall becomes exact.

The exact join of the history (all of it, or the last span of arrival time), computed by Spark, is
compared with ``gold/join_results``; every missing pair is MERGEd with ``produced_by = "repair"``,
the repair's horizon as its interval and -1 for the retention and parameter version. Rerunning adds
nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.errors import StateError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import JOIN_RESULTS, JOIN_STATE
from outoforder.stages import state
from outoforder.stages.context import StageContext
from outoforder.stages.join import history
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import result_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JoinRepairSummary:
    """What one repair did: true pairs in the history, those missing from the results, those added."""

    source: str
    job: str
    until_us: int
    true_pairs: int
    missing: int
    added: int

    def line(self) -> str:
        """One progress line."""
        return (
            f"[join-repair] {self.source} ({self.job}): {self.true_pairs:,} true pairs before "
            f"{self.until_us}, {self.missing:,} missing from the stream's results, {self.added:,} added"
        )


def _merge_pairs(pairs: DataFrame, settings: Settings) -> int:
    """Insert the pairs not yet in ``gold/join_results``; the MERGE reads only the files of their seqs."""
    from outoforder.io import delta

    keys = ("source", "job", "r_seq", "s_seq")
    return delta.merge_new(pairs, JOIN_RESULTS, settings.lake_root, keys, prune=("r_seq", "s_seq"))


@retry_on_conflict
def repair(
    ctx: StageContext,
    until_us: int,
    span_us: int | None = None,
) -> JoinRepairSummary:
    """Add the true pairs the stream missed among the arrivals before ``until_us``; idempotent.

    The exact join, the comparison and the MERGE run in Spark: the driver sees three counts.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    from pyspark.sql import functions as F

    from outoforder.spark.rows import one_row

    jid = job.job_id()
    first = state.first_start(spark, settings, JOIN_STATE, source, jid)
    if first is None:
        msg = f"the stream join of {source} ({jid}) has not run yet: nothing to repair"
        raise StateError(msg)
    lo = max(first, until_us - (span_us or until_us))
    arrivals = history.job_arrivals(ctx, (lo, until_us)).localCheckpoint()
    span = one_row(arrivals.agg(F.min("seq").alias("lo"), F.max("seq").alias("hi")))
    if span["lo"] is None:
        return JoinRepairSummary(source, jid, until_us, 0, 0, 0)
    truth = history.truth(arrivals, job).localCheckpoint()
    got = history.produced(spark, settings, source, jid, (int(span["lo"]), int(span["hi"])))
    missing = result_rows(
        truth.join(got, ["r_seq", "s_seq"], "left_anti").withColumn(
            "emitted_at_seq", F.greatest("r_seq", "s_seq")  # the arrival that completed the pair
        ),
        source, jid, "repair", (until_us, until_us), (-1, -1, -1), time.time_ns() // 1000,
    ).localCheckpoint()  # fmt: skip
    counts = one_row(truth.agg(F.count("*").alias("n")))
    n_missing = missing.count()
    added = _merge_pairs(missing, settings) if n_missing else 0
    summary = JoinRepairSummary(source, jid, until_us, int(counts["n"]), n_missing, added)
    log.info("%s", summary.line())
    return summary
