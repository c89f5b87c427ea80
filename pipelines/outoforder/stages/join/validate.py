"""``validate-join``: recall per closed period of the stream join, stored and checked with Great Expectations.

The recall of every closed period against the exact join goes to ``gold/join_metrics`` (method
``stream:<job>``) and to the quality measures; Great Expectations checks that no result pair is
stored twice and that the closed periods' recall is at least Q_user in the share
``quality.periods_met`` of them (judged over the run's periods and the job's latest before them,
``quality.windows_judged_s`` of periods and ``quality.periods_judged`` at least). A violation fails
the task, or is only reported with ``on_violation="warn"``. The exact join runs in Spark; a run over
a data interval (``--since``, as the DAG passes it) judges only the periods that closed in it.

Under a retention bound (the job's ``max_retention``) each adaptation states the recall the bound
allows (``silver/join_params``). A period where one of them stated less than Q_user was out of
reach: it is left out of ``join_recall`` (a miss there is the controller's shortfall, and fails)
and judged by ``join_feasibility``, whose failure is a warning naming the retention needed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from outoforder.errors import StateError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.tables import JOIN_METRICS, JOIN_RESULTS
from outoforder.stages.context import StageContext
from outoforder.stages.join import history
from outoforder.stages.join.evaluate import COST_COLUMNS
from outoforder.stages.join.spec import JoinJob

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


def _origin(ctx: StageContext, h: history.Horizon, reuse: bool) -> int | None:
    """The event time periods count from: the earliest event time of the job's history.

    With ``reuse``, the origin of the periods already stored (so that periods judged by earlier
    runs keep their numbers; read without Spark); otherwise, or before the first, the one the
    passes carry in the state (:data:`~outoforder.spark.join_pass.ORIGIN`); a state written before
    they carried it has it computed over the history (one more Spark job).
    """
    settings, source, job = ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    from pyspark.sql import functions as F

    from outoforder.io import deltars
    from outoforder.spark.rows import one_row

    if reuse:
        method = f"stream:{job.job_id()}"
        got = deltars.read_table(
            JOIN_METRICS, settings.lake_root, settings.storage,
            [("source", "=", source), ("method", "=", method)], columns=["period", "start_us"],
        )  # fmt: skip
        if got is not None and got.num_rows:
            row = got.slice(0, 1).to_pylist()[0]
            return int(row["start_us"]) - int(row["period"]) * job.period_us
    if h.origin_us is not None:
        return h.origin_us
    arrivals = history.job_arrivals(ctx, (h.first_us, h.as_of_us))
    found = one_row(arrivals.agg(F.min("ts").alias("origin")))["origin"]
    return None if found is None else int(found)


STORED_COLUMNS = ["period", "stored_rows", "distinct_pairs"]


def _no_rows(columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(columns=columns)


@dataclass(frozen=True)
class PeriodQuality:
    """What a check judged: one row per period, the periods' range and their event time (inclusive, µs).

    ``stored`` counts, per period of a pair's later event time, the result rows the job stored and
    the distinct pairs among them: equal counts mean no pair was stored twice.
    """

    frame: pd.DataFrame  # period, start_us, true_pairs, produced_pairs, recall, met
    periods: tuple[int, int] | None = None
    event_us: tuple[int, int] | None = None  # [start, end) of the judged periods' event time
    stored: pd.DataFrame = field(default_factory=lambda: _no_rows(STORED_COLUMNS))


def period_quality(
    ctx: StageContext,
    until_us: int | None,
    since_us: int | None = None,
) -> PeriodQuality:
    """Recall of the stream's results against the exact join, per period closed by ``until_us``.

    A period is *closed* once the joint progress is one full period past its end (by then the late
    tuples of typical disorder have arrived). With ``since_us``, only the periods that closed after
    it (a run over the data interval ``[since, until)`` judges what closed in it, so its cost
    follows the interval, not the history); without, every closed period. The truth is the exact
    join of the arrivals the stream had processed by ``until_us``; it and the stored pairs meet
    per period in Spark tasks (:func:`outoforder.spark.judge.join_periods`: two Spark jobs), and the
    driver receives one row per period, with the stored rows' copies for the duplicate check.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    import pandas as pd
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.spark.judge import join_periods

    cols = ["period", "start_us", "true_pairs", "produced_pairs", "recall", "met"]
    none = PeriodQuality(_no_rows(cols))
    h = history.horizon(ctx, until_us)
    if h is None:
        by = "yet" if until_us is None else f"by {until_us}"
        msg = f"the stream join of {source} ({job.job_id()}) has not run {by}: nothing to check"
        raise StateError(msg)
    if h.progress_us is None or h.last_seq is None:
        return none
    origin = _origin(ctx, h, reuse=since_us is not None)
    if origin is None:
        return none
    p = job.period_us
    last = (h.progress_us - 2 * p - origin) // p  # the newest closed period
    first: int | None = None
    if since_us is not None:
        before = history.horizon(ctx, since_us)
        if before is not None and before.progress_us is not None:
            first = (before.progress_us - 2 * p - origin) // p + 1
    if first is not None and first > last:
        return none
    lo = None if first is None else origin + first * p
    hi = origin + (last + 1) * p
    arrivals = history.job_arrivals(
        ctx, (h.first_us, h.as_of_us), (None if lo is None else lo - job.window_us, hi)
    )
    # the pairs stored by the passes up to the state judged (and the repair's among them)
    results = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(
        (F.col("source") == source)
        & (F.col("job") == job.job_id())
        & (F.col("emitted_at_seq") <= F.lit(h.last_seq))
    )
    if lo is not None:  # files of other event times are skipped by their statistics
        earliest = F.lit(lo - job.window_us)
        results = results.where(
            (F.col("r_ts") >= earliest)
            & (F.col("s_ts") >= earliest)
            & (F.greatest("r_ts", "s_ts") < F.lit(hi))
        )
    counts = (
        join_periods(
            arrivals, results.select("r_seq", "s_seq", "r_ts", "s_ts"), job.query(), origin, p, (first, last)
        )
        .toPandas()
        .sort_values("period")
        .reset_index(drop=True)
    )  # one row per period
    stored = counts.loc[counts["stored_rows"] > 0, STORED_COLUMNS].reset_index(drop=True)
    judged = counts[(counts["true_pairs"] > 0) & (counts["period"] <= last)]
    rows = []
    for period, n_true, n_prod in zip(
        judged["period"].tolist(),
        judged["true_pairs"].tolist(),
        judged["produced_pairs"].tolist(),
        strict=True,
    ):
        recall = n_prod / n_true
        rows.append((period, origin + period * p, n_true, n_prod, recall, recall >= job.q_user - 1e-12))
    lo_period = first if first is not None else (rows[0][0] if rows else last)
    frame = pd.DataFrame(rows, columns=cols)
    return PeriodQuality(frame, (lo_period, last), (origin + lo_period * p, hi), stored)


@retry_on_conflict
def validate_join(
    ctx: StageContext,
    until_us: int | None,
    fail: bool | None = None,
    run_name: str | None = None,
    since_us: int | None = None,
) -> list[Any]:
    """Store per-period recall and run the GX checks (duplicates, recall per closed period).

    With ``since_us`` only the periods closed after it are judged and replaced (see
    :func:`period_quality`); without, every closed period. ``fail`` None follows
    ``quality.on_violation``.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    import pandas as pd

    from outoforder.io import deltars
    from outoforder.io.tables import JOIN_STATE
    from outoforder.quality.checkpoints import conclude, publish, run_checkpoint
    from outoforder.quality.measures import record_measures
    from outoforder.stages.state import nothing_judged

    jid = job.job_id()
    judged = period_quality(ctx, until_us, since_us)
    quality = judged.frame
    if not len(quality) and (since_us is None or history.first_start(ctx) is None):
        raise nothing_judged(spark, settings, JOIN_STATE, source, jid, "validate-join", "period")
    method = f"stream:{jid}"
    records = quality.to_dict("records")
    # an incremental run replaces the periods it judged; a full one every period of the job
    items = None if since_us is None else judged.periods or (0, -1)
    rows = [
        (
            source, method, int(r["period"]), int(r["start_us"]), int(r["true_pairs"]),
            int(r["produced_pairs"]), float(r["recall"]), bool(r["met"]), float(job.q_user),
            *(None for _ in COST_COLUMNS),  # the memory at each decision is in silver/join_params
        )
        for r in records
    ]  # fmt: skip
    metrics = pd.DataFrame(rows, columns=JOIN_METRICS.schema.fieldNames())  # one row per period judged
    if items is None or items[0] <= items[1]:
        between = None if items is None else ("period", items[0], items[1] + 1)
        match: dict[str, str | int] = {"source": source, "method": method}
        deltars.replace_rows(JOIN_METRICS, settings.lake_root, settings.storage, rows, match, between)
        record_measures(
            settings, source, jid, "join_recall",
            [
                (int(r["period"]), int(r["start_us"]), int(r["start_us"]) + job.period_us, float(r["recall"]),
                 float(job.q_user), bool(r["met"]))
                for r in records
            ],
            items,
        )  # fmt: skip
    # the promise is a share of periods: a run judges its own with the job's latest before them
    judged_together = _with_earlier(ctx, metrics, settings.quality.periods_borrowed(job.period_us))
    frames: dict[str, Any] = {"join_results": judged.stored, "join_recall": judged_together}
    if job.latency_bound_us is not None and len(quality):
        stated = period_statements(ctx)
        reach = reachability(quality[["period", "start_us"]], stated, job.period_us)
        frames["join_feasibility"] = reach
        together = reachability(judged_together[["period", "start_us"]], stated, job.period_us)
        allowed = together.loc[together["reachable"] >= job.q_user, "period"]
        frames["join_recall"] = judged_together[judged_together["period"].isin(allowed)]
    suites = run_checkpoint(
        settings, "join", frames, source=source, job=jid, run_name=run_name, q_user=job.q_user,
        periods_met=settings.quality.periods_required(len(frames["join_recall"])),
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
    ok = {s.suite: s.success for s in suites}
    if ok.get("join_feasibility") is False:  # out of reach under the bound: said, not failed
        out = frames["join_feasibility"]
        short = out[out["reachable"] < job.q_user]
        log.warning(
            "[validate-join] %s (%s): in %d closed periods Q_user = %s was out of reach under the "
            "retention bound of %g s (the adaptations stated recall down to %.4f); they needed a "
            "retention of up to %g s (--latency-bound-s). Those periods are reported, not failed.",
            source, jid, len(short), job.q_user, (job.latency_bound_us or 0) / 1e6,
            short["reachable"].min(), short["needed_us"].max() / 1e6,
        )  # fmt: skip
    publish(
        suites, JOIN_RESULTS.name, "join_recall", len(quality), met, q_user=job.q_user,
        periods_met=settings.quality.periods_met,
        recall_min=float(quality["recall"].min()) if len(quality) else None,
        periods=list(judged.periods) if judged.periods else None,
    )  # fmt: skip
    conclude(suites, "stream join", settings.quality.fails(fail))
    return suites


def _with_earlier(ctx: StageContext, judged: pd.DataFrame, at_least: int) -> pd.DataFrame:
    """The periods a run judged after the job's latest ones before them: ``at_least`` in all.

    ``judged`` holds rows of ``gold/join_metrics``; fewer than ``at_least`` come back when the job
    has no more, and none when the run judged none (nothing new to judge). A run of a minute judges
    a few periods; the promise (recall ≥ Q_user in a share of periods) is judged over enough of them
    for one miss to be within the share. The latest are those after the periods of the check's
    newest failed verdict: a miss is reported once. Read without Spark: one row per period of the job.
    """
    import pandas as pd

    from outoforder.io import deltars

    missing = at_least - len(judged)
    if missing <= 0 or not len(judged):
        return judged
    settings, source, job = ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    first = int(judged["period"].min())
    origin = int(judged["start_us"].min()) - first * job.period_us  # where the periods count from
    after = _last_failed_period(ctx, origin)
    # the recent periods only (a period without true pairs has no row: ten times the need is ample),
    # not the job's whole history at every run
    lowest = first - 10 * missing if after is None else max(first - 10 * missing, after + 1)
    filters: list[tuple[str, str, Any]] = [
        ("source", "=", source), ("method", "=", f"stream:{job.job_id()}"),
        ("period", ">=", lowest), ("period", "<", first),
    ]  # fmt: skip
    got = deltars.read_table(JOIN_METRICS, settings.lake_root, settings.storage, filters)
    if got is None or not got.num_rows:
        return judged
    earlier: pd.DataFrame = got.to_pandas().sort_values("period").tail(missing)[list(judged.columns)]
    together: pd.DataFrame = pd.concat([earlier, judged], ignore_index=True)
    return together


def _last_failed_period(ctx: StageContext, origin: int) -> int | None:
    """The newest period the check's newest failed verdict judged closed (None: none failed)."""
    from outoforder.stages.positions import failed_until

    failed = failed_until(ctx)
    h = None if failed is None else history.horizon(ctx, failed)
    if h is None or h.progress_us is None:
        return None
    p = ctx.job_of(JoinJob).period_us
    return (h.progress_us - 2 * p - origin) // p  # as period_quality closes them


def period_statements(ctx: StageContext) -> pd.DataFrame:
    """The job's adaptations with their statements: progress, recall reachable, retention needed.

    One row per adaptation (small: one per interval L of the stream's history), read without Spark.
    """
    settings, source, job = ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    import json

    import pandas as pd

    from outoforder.io import deltars
    from outoforder.io.tables import JOIN_PARAMS

    got = deltars.read_table(
        JOIN_PARAMS, settings.lake_root, settings.storage,
        [("source", "=", source), ("job", "=", job.job_id())], columns=["progress_us", "stats_json"],
    )  # fmt: skip
    rows = [] if got is None else got.to_pylist()
    stats = [json.loads(r["stats_json"]) for r in rows]
    return pd.DataFrame(
        {
            "progress_us": [int(r["progress_us"]) for r in rows],
            "reachable": [float(s.get("reachable", 1.0)) for s in stats],
            "needed_us": [float(s.get("needed_us", 0)) for s in stats],
        }
    )


def reachability(periods: pd.DataFrame, stated: pd.DataFrame, period_us: int) -> pd.DataFrame:
    """Per period: the lowest recall the adaptations about it stated reachable, and what they needed.

    An adaptation decided at progress T (event time) states what the last period of data before T
    allowed, so a period takes the statements decided in it and in the period after it; a period
    without one has no statement and counts as reachable.

    >>> import pandas as pd
    >>> periods = pd.DataFrame({"period": [0, 1], "start_us": [0, 10]})
    >>> stated = pd.DataFrame(
    ...     {"progress_us": [3, 12, 15], "reachable": [1.0, 0.8, 0.9], "needed_us": [0, 30, 20]}
    ... )
    >>> reachability(periods, stated, 10).to_dict("list")
    {'period': [0, 1], 'reachable': [0.8, 0.8], 'needed_us': [30.0, 30.0]}
    """
    import pandas as pd

    out: dict[str, list[float]] = {"period": [], "reachable": [], "needed_us": []}
    for period, start in zip(periods["period"], periods["start_us"], strict=True):
        mine = stated[(stated["progress_us"] >= start) & (stated["progress_us"] < start + 2 * period_us)]
        out["period"].append(int(period))
        out["reachable"].append(float(mine["reachable"].min()) if len(mine) else 1.0)
        out["needed_us"].append(float(mine["needed_us"].max()) if len(mine) else 0.0)
    return pd.DataFrame(out)
