"""``validate-join``: recall per closed period of the stream join, stored and checked with Great Expectations.

The recall of every closed period against the exact join goes to ``gold/join_metrics`` (method
``stream:<job>``) and to the quality measures; Great Expectations checks that no result pair is
stored twice and that every closed period's recall is at least Q_user. A violation fails the
task, or is only reported with ``on_violation="warn"``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.core.joins.metrics import period_recall
from outoforder.core.joins.progress import joint_progress
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import JOIN_METRICS, JOIN_RESULTS
from outoforder.stages.interval import where_job
from outoforder.stages.join import history
from outoforder.stages.join.evaluate import COST_COLUMNS
from outoforder.stages.join.spec import JoinJob

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def period_quality(
    spark: SparkSession, settings: Settings, source: str, job: JoinJob, until_us: int
) -> pd.DataFrame:
    """Recall per closed period of the stream's results against the exact join of bronze.

    A period is *closed* once the joint progress at ``until_us`` is one full period past its end
    (by then the late tuples of typical disorder have arrived; later ones count when re-checked).
    """
    import pandas as pd

    seen = history.judged(spark, settings, source, job, until_us)
    cols = ["period", "start_us", "true_pairs", "produced_pairs", "recall", "met"]
    if seen is None:
        return pd.DataFrame(columns=cols)
    periods = period_recall(seen.inp, seen.truth, seen.truth[seen.produced], job.period_us, job.q_user)
    t_end = int(joint_progress(seen.inp)[-1])
    closed = [p for p in periods if p.start_us + 2 * job.period_us <= t_end]
    return pd.DataFrame([asdict(p) for p in closed], columns=cols)


@retry_on_conflict
def validate(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: JoinJob,
    until_us: int,
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[Any]:
    """Store per-period recall and run the GX checks (duplicates, recall per closed period).

    ``fail`` None follows ``quality.on_violation``.
    """
    from outoforder.io import delta
    from outoforder.quality.checkpoints import conclude, run_checkpoint
    from outoforder.quality.measures import record_measures

    jid = job.job_id()
    quality = period_quality(spark, settings, source, job, until_us)
    method = f"stream:{jid}"
    records = quality.to_dict("records")
    rows = [
        (
            source, method, int(r["period"]), int(r["start_us"]), int(r["true_pairs"]),
            int(r["produced_pairs"]), float(r["recall"]), bool(r["met"]), float(job.q_user),
            *(None for _ in COST_COLUMNS),  # buffered tuples per interval are in silver/join_state
        )
        for r in records
    ]  # fmt: skip
    metrics = spark.createDataFrame(rows, JOIN_METRICS.schema)
    delta.replace_where(metrics, JOIN_METRICS, settings.lake_root, {"source": source, "method": method})
    record_measures(
        spark, settings, source, jid, "join_recall",
        [
            (int(r["period"]), int(r["start_us"]), int(r["start_us"]) + job.period_us, float(r["recall"]),
             float(job.q_user), bool(r["met"]))
            for r in records
        ],
    )  # fmt: skip
    results = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(where_job(source, jid))
    suites = run_checkpoint(
        settings, "join", {"join_results": results, "join_recall": metrics},
        source=source, job=jid, run_name=run_name, q_user=job.q_user,
    )  # fmt: skip
    met = int(quality["met"].sum()) if len(quality) else 0
    spread = (
        f", recall min {quality['recall'].min():.4f} mean {quality['recall'].mean():.4f}"
        if len(quality)
        else ""
    )
    log.info(
        "[validate-join] %s (%s): %d closed periods, %d meet Q_user = %s%s",
        source, jid, len(quality), met, job.q_user, spread,
    )  # fmt: skip
    conclude(suites, "stream join", settings.quality.fails(fail))
    return suites
