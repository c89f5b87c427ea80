"""``validate-topk``: Great Expectations on the top-k stream against the exact top-k of bronze.

The exact top-k comes from Spark (:func:`outoforder.spark.topk.window_topk`). Every window up to
the last emitted one must be emitted once, or all its tuples came late; the mean accuracy over
the closed windows (those whose ``end + horizon`` the stream has passed) must be at least ε_min.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.errors import QualityError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages.interval import where_job
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import topk_tuples

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.quality.checkpoints import SuiteResult

log = logging.getLogger(__name__)


class NothingYet(QualityError):
    """The stream has emitted no window yet: there is nothing to judge (not a violation)."""


def window_accuracy(spark: SparkSession, settings: Settings, source: str, job: TopKJob) -> DataFrame:
    """Per window of bronze up to the last emitted one: emissions, all late, hit rate, closed.

    The exact top-k comes from :func:`outoforder.spark.topk.window_topk` over the job's bronze rows.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, TOPK_LATE, TOPK_RESULTS, TOPK_STATE, TOPK_WINDOWS
    from outoforder.spark.topk import window_topk
    from outoforder.spark.windows import memberships

    jid = job.job_id()
    for t in (TOPK_STATE, TOPK_WINDOWS, TOPK_RESULTS, TOPK_LATE):
        if not delta.exists(spark, t, settings.lake_root):
            msg = f"the top-k stream has not run yet (no {t.name} under {settings.lake_root})"
            raise QualityError(msg)
    mine = where_job(source, jid)
    state = (
        delta.read(spark, TOPK_STATE, settings.lake_root)
        .where(mine)
        .orderBy(F.col("as_of_us").desc())
        .first()
    )
    emitted = delta.read(spark, TOPK_WINDOWS, settings.lake_root).where(mine)
    top = emitted.agg(F.max("window_id")).first()
    if state is None or top is None or top[0] is None:
        msg = f"{source}, job {jid}"
        raise NothingYet(msg)
    progress = json.loads(state["snapshot"])["operator"]["progress"]
    bronze = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == source)
    tuples = topk_tuples(bronze, job).where(F.col("score").isNotNull())
    truth = window_topk(tuples, job.windows(), job.k).where(F.col("window_id") <= top[0])
    got = delta.read(spark, TOPK_RESULTS, settings.lake_root).where(mine).select("window_id", "seq")
    hits = (
        truth.join(got.withColumn("hit", F.lit(1)), ["window_id", "seq"], "left")
        .groupBy("window_id")
        .agg((F.sum(F.coalesce("hit", F.lit(0))) / F.count("*")).alias("hit_rate"))
    )
    counts = emitted.groupBy("window_id").agg(F.count("*").alias("emissions"))
    members = tuples.select("seq", F.explode(memberships(tuples, job.windows())).alias("window_id"))
    late = delta.read(spark, TOPK_LATE, settings.lake_root).where(mine).select("seq", "window_id")
    all_late = (
        members.where(F.col("window_id") <= top[0])
        .join(late.withColumn("was_late", F.lit(True)), ["seq", "window_id"], "left")
        .groupBy("window_id")
        .agg(F.min(F.coalesce("was_late", F.lit(False))).alias("all_late"))
    )
    end = F.col("window_id") * job.slide_us + job.window_us
    return (
        all_late.join(hits, "window_id", "left")
        .join(counts, "window_id", "left")
        .select(
            "window_id",
            F.coalesce("emissions", F.lit(0)).alias("emissions"),
            "all_late",
            (F.coalesce("emissions", F.lit(0)) == 1).alias("emitted_once"),
            ((F.coalesce("emissions", F.lit(0)) == 1) | F.col("all_late")).alias("accounted"),
            "hit_rate",
            (end + job.horizon_us <= F.lit(progress)).alias("closed"),
        )
    )


@retry_on_conflict
def validate(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: TopKJob,
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[SuiteResult]:
    """GX: every window emitted once (or all its tuples late); closed windows' accuracy >= ε_min.

    Before the first emission there is nothing to check, and no accuracy verdict before the first
    window closes: both are reported, neither fails. ``fail`` None follows ``quality.on_violation``.
    """
    from pyspark.sql import functions as F

    from outoforder.quality.checkpoints import conclude, run_checkpoint
    from outoforder.quality.measures import record_measures

    try:
        judged = window_accuracy(spark, settings, source, job).localCheckpoint()
    except NothingYet as e:
        log.info("[quality] no top-k window emitted yet (%s): nothing to check", e)
        return []
    closed = judged.where("closed")
    n_all, n_closed = judged.count(), closed.count()
    frames = {"topk_completeness": judged}
    if n_closed:  # the mean of no window is undefined; before the first closes there is no verdict
        frames["topk_accuracy"] = closed
    jid = job.job_id()
    record_measures(
        spark, settings, source, jid, "topk_hit_rate",
        [
            (int(r[0]), int(r[0]) * job.slide_us, int(r[0]) * job.slide_us + job.window_us,
             None if r[1] is None else float(r[1]), float(job.eps_min),
             r[1] is not None and float(r[1]) >= job.eps_min)
            for r in closed.select("window_id", "hit_rate").collect()
        ],
    )  # fmt: skip
    suites = run_checkpoint(
        settings, "topk", frames, source=source, job=jid, run_name=run_name, eps_min=job.eps_min
    )
    mean = closed.agg(F.avg("hit_rate")).first()
    acc = "no closed window" if mean is None or mean[0] is None else f"accuracy {mean[0]:.4f}"
    what = f"top-{job.k} {jid} of {source}: {n_all} windows, {n_closed} closed, {acc}"
    log.info("[validate-topk] %s (ε_min %s)", what, job.eps_min)
    conclude(suites, what, settings.quality.fails(fail))
    return suites
