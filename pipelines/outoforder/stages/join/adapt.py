"""``join-adapt``: choose the stream join's retention in force from a time on, from the history.

It looks at the history up to ``until`` (:mod:`outoforder.stages.join.history`): the exact join
of bronze and the pairs the stream produced, and writes the retention for the next intervals with
the statistics it came from to ``silver/join_params`` (either estimator of
:mod:`outoforder.core.joins.adaptation`). Rerunning it rewrites the same row. The robust
estimator's memory of what older periods needed comes from the earlier decisions' rows, so the
history it reads is three periods however long the memory.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.core.joins.adaptation import MEASURED_PERIODS, decide
from outoforder.core.joins.progress import NEG, joint_progress
from outoforder.errors import InputError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import JOIN_PARAMS
from outoforder.stages.context import StageContext
from outoforder.stages.join import history
from outoforder.stages.join.spec import JoinJob

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@retry_on_conflict
def adapt(ctx: StageContext, until_us: int) -> dict[str, Any]:
    """Choose the retention in force from ``until_us`` on; store it with its statistics."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    from outoforder.io import delta

    jid = job.job_id()
    # the controller looks at the last period (eq. 3), learns from pairs up to a period old and
    # measures what the last two periods needed: three periods of arrivals bound the work however
    # long the job has run; older periods' needs are in the earlier decisions' rows
    span_us = (MEASURED_PERIODS + 1) * job.period_us
    seen = history.judged(ctx, until_us, span_us=span_us)
    if seen is None:
        msg = f"no arrivals of {source} before {until_us}: nothing to adapt on"
        raise InputError(msg)
    progress = joint_progress(seen.inp)
    now = int(progress[-1])
    remembered = (
        earlier_needs(spark, settings, source, jid, until_us, now - job.memory_periods * job.period_us, now)
        if job.estimator == "robust" and job.memory_periods > MEASURED_PERIODS and now > NEG
        else []
    )
    step = decide(seen.inp, job.query(), job.adaptation(), seen.produced, seen.truth, remembered)
    row = {
        "source": source,
        "job": jid,
        "valid_from_us": until_us,
        "progress_us": step.progress_us,
        "estimator": job.estimator,
        "q_user": job.q_user,
        "q_l": step.q_l,
        "d_r_us": step.d_r_us,
        "d_s_us": step.d_s_us,
        "estimated_q": step.estimated_q,
        "stats_json": json.dumps(step.stats, sort_keys=True),
        "computed_at_us": time.time_ns() // 1000,
    }
    delta.replace_rows(
        spark, JOIN_PARAMS, settings.lake_root, settings.storage,
        [tuple(row[f.name] for f in JOIN_PARAMS.schema.fields)],
        {"source": source, "job": jid, "valid_from_us": until_us},
    )  # fmt: skip
    log.info(
        "[join-adapt] %s (%s) from %d: Q_L = %.4f, d = (%g, %g) ms, estimated recall %.4f; "
        "%s arrivals, %s true pairs, %s produced",
        source, jid, until_us, step.q_l, step.d_r_us / 1000, step.d_s_us / 1000, step.estimated_q,
        f"{len(seen.inp):,}", f"{seen.truth.shape[0]:,}", f"{int(seen.produced.sum()):,}",
    )  # fmt: skip
    reach = float(step.stats["reachable"])
    if job.latency_bound_us is not None and reach < job.q_user:
        log.warning(
            "[join-adapt] %s (%s) from %d: Q_user %s is out of reach under the retention bound of %g s: "
            "it allows recall %.4f; the controller aimed at %g s",
            source, jid, until_us, job.q_user, job.latency_bound_us / 1e6, reach,
            step.stats["needed_us"] / 1e6,
        )  # fmt: skip
    return row


def earlier_needs(
    spark: SparkSession, settings: Settings, source: str, jid: str, until_us: int, since_us: int, now_us: int
) -> list[tuple[int, int]]:
    """(progress, measured need) of the job's decisions before ``until_us`` made at progress in [since, now).

    One row per decision: a day at one adaptation a minute is 1,440 rows, a memory of 20
    periods of a minute 120 of them.
    """
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.stages.state import where_job

    delta.ensure(spark, JOIN_PARAMS, settings.lake_root)
    rows = (
        delta.read(spark, JOIN_PARAMS, settings.lake_root)
        .where(
            where_job(source, jid)
            & (F.col("valid_from_us") < until_us)
            & (F.col("progress_us") >= since_us)
            & (F.col("progress_us") < now_us)
        )
        .select("progress_us", F.get_json_object("stats_json", "$.measured_need_us").alias("need"))
        .where(F.col("need").isNotNull())
        .collect()
    )
    return sorted((int(r[0]), int(r[1])) for r in rows)
