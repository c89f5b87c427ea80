"""``join-repair``: add the true pairs the stream join missed, so join recall becomes exact.

The exact join of the history (all of it, or the last span of arrival time) is compared with
``gold/join_results``; every missing pair is MERGEd with ``produced_by = "repair"``, the repair's
horizon as its interval and -1 for the retention and parameter version. Rerunning adds nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import JOIN_RESULTS
from outoforder.stages.join import history
from outoforder.stages.join.spec import JoinJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    span_us: int | None = None,
) -> JoinRepairSummary:
    """Add the true pairs the stream missed among the arrivals before ``until_us``; idempotent."""
    jid = job.job_id()
    seen = history.judged(spark, settings, source, job, until_us, span_us)
    if seen is None:
        return JoinRepairSummary(source, jid, until_us, 0, 0, 0)
    inp, seqs = seen.inp, seen.seqs
    missing = seen.truth[~seen.produced]
    now_us = time.time_ns() // 1000
    rows = [
        (
            source, jid, int(seqs[r]), int(seqs[s]), int(inp.ts[r]), int(inp.ts[s]),
            int(max(seqs[r], seqs[s])),  # the arrival that completed the pair
            "repair", until_us, until_us, -1, -1, -1, now_us,
        )
        for r, s in missing.tolist()
    ]  # fmt: skip
    added = _merge_pairs(spark.createDataFrame(rows, JOIN_RESULTS.schema), settings) if rows else 0
    summary = JoinRepairSummary(source, jid, until_us, len(seen.truth), len(missing), added)
    log.info("%s", summary.line())
    return summary
