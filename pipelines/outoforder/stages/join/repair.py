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
from outoforder.io.tables import JOIN_RESULTS
from outoforder.stages.context import StageContext
from outoforder.stages.join import history
from outoforder.stages.join.spec import JoinJob

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
    first = history.first_start(ctx)
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
    missing = truth.join(got, ["r_seq", "s_seq"], "left_anti").select(
        F.lit(source).alias("source"), F.lit(jid).alias("job"), "r_seq", "s_seq", "r_ts", "s_ts",
        F.greatest("r_seq", "s_seq").alias("emitted_at_seq"),  # the arrival that completed the pair
        F.lit(None).cast("long").alias("emitted_at_us"),  # not emitted by an arrival: found afterwards
        F.lit("repair").alias("produced_by"), F.lit(-1).cast("long").alias("d_r_us"),
        F.lit(-1).cast("long").alias("d_s_us"), F.lit(-1).cast("long").alias("params_version"),
        F.lit(time.time_ns() // 1000).cast("long").alias("written_at_us"),
    ).localCheckpoint()  # fmt: skip
    counts = one_row(truth.agg(F.count("*").alias("n")))
    n_missing = missing.count()
    added = _merge_pairs(missing, settings) if n_missing else 0
    summary = JoinRepairSummary(source, jid, until_us, int(counts["n"]), n_missing, added)
    log.info("%s", summary.line())
    return summary
