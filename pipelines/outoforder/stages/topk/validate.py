"""``validate-topk``: Great Expectations on the top-k stream against the exact top-k of bronze.

The exact top-k comes from Spark (:func:`outoforder.spark.topk.window_topk`). Every window up to
the last emitted one must be emitted once, or all its tuples came late; the mean accuracy over
the closed windows (those whose ``end + horizon`` the stream has passed) must be at least ε_min.
A run over a data interval (``--since``) judges only the windows emitted or closed in it, reading
only their tuples.

Under a latency bound (the job's ``max_cache``) the check also asks whether ε_min was reachable at
all: from the lateness of each settled window's true top-k (``silver/topk_ledger``), the accuracy
a cache waiting the whole bound would have had. A miss the bound allowed to avoid is the
controller's shortfall and fails; a miss the bound made unavoidable is a configuration matter: it
is reported as a warning naming the bound that ε_min needed, and does not fail the task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from outoforder.core.topk.cache import accuracy_at, needed_cache
from outoforder.errors import QualityError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages.context import StageContext
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import topk_tuples

if TYPE_CHECKING:
    import pandas as pd

    from outoforder.quality.checkpoints import SuiteResult

log = logging.getLogger(__name__)
NOTHING_EMITTED = -(2**62)  # the operator's next_emit before its first emission


class NothingYet(QualityError):
    """The stream has emitted no window yet: there is nothing to judge (not a violation)."""


@dataclass(frozen=True)
class Judged:
    """What a check judges: arrivals before ``as_of_us``; window ranges ``(lo, hi]`` (lo None: open).

    ``complete``: windows that must be emitted once (up to the newest emitted one); ``closed``:
    windows whose accuracy is final (their end + the horizon passed, and emitted).
    """

    as_of_us: int
    complete: tuple[int | None, int]
    closed: tuple[int | None, int]


def _standings(
    ctx: StageContext,
    until_us: int | None,
    since_us: int | None,
) -> list[tuple[int, int, int] | None]:
    """(as_of, newest window emitted, newest window closed) of the states a check judges from.

    For the state at ``until_us`` and the one at ``since_us``, read without Spark: the operator's
    snapshot says where it stands (every window below ``next_emit`` is emitted, or was due empty).
    """
    settings, source, job = ctx.settings, ctx.bronze_source, ctx.job_of(TopKJob)
    from outoforder.io.tables import TOPK_STATE
    from outoforder.stages.passes import state_row

    jid = job.job_id()
    states = [state_row(settings, TOPK_STATE, source, jid, until_us)]
    states.append(None if since_us is None else state_row(settings, TOPK_STATE, source, jid, since_us))
    out: list[tuple[int, int, int] | None] = []
    for st in states:
        snap = None if st is None else json.loads(st["scalars"])["operator"]["operator"]
        if (
            st is None
            or snap is None
            or snap["progress"] is None
            or int(snap["next_emit"]) <= NOTHING_EMITTED
        ):
            out.append(None)
            continue
        top = int(snap["next_emit"]) - 1
        closed = (int(snap["progress"]) - job.horizon_us - job.window_us) // job.slide_us
        out.append((int(st["as_of_us"]), top, min(closed, top)))
    return out


def judged_windows(
    ctx: StageContext,
    until_us: int | None,
    since_us: int | None,
) -> Judged:
    """The windows a check at ``until_us`` (None: the newest state) judges, after ``since_us`` if given."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(TopKJob)
    from outoforder.io import delta
    from outoforder.io.tables import TOPK_STATE

    if not delta.exists(spark, TOPK_STATE, settings.lake_root):
        msg = f"the top-k stream has not run yet (no {TOPK_STATE.name} under {settings.lake_root})"
        raise QualityError(msg)
    now, before = _standings(ctx, until_us, since_us)
    if now is None:
        msg = f"{source}, job {job.job_id()}"
        raise NothingYet(msg)
    as_of, top, closed = now
    if before is None:
        return Judged(as_of, (None, top), (None, closed))
    return Judged(as_of, (before[1], top), (before[2], closed))


def _rows(ctx: StageContext, table: Any, lo: int | None, hi: int, columns: list[str], **match: Any) -> Any:
    """The job's rows of a small table for windows ``(lo, hi]``, read on the driver (pandas)."""
    import pandas as pd

    from outoforder.io import deltars

    filters: list[Any] = [("source", "=", ctx.bronze_source), ("job", "=", ctx.job_of(TopKJob).job_id())]
    filters += [("window_id", "<=", hi)] + ([] if lo is None else [("window_id", ">", lo)])
    filters += [(c, "=", v) for c, v in match.items()]
    got = deltars.read_table(table, ctx.settings.lake_root, ctx.settings.storage, filters, columns=columns)
    return pd.DataFrame(columns=columns) if got is None else got.to_pandas()


def window_accuracy(
    ctx: StageContext,
    until_us: int | None = None,
    since_us: int | None = None,
) -> pd.DataFrame:
    """Per judged window: emissions, all late, hit rate, whether it is judged complete and closed.

    The exact top-k of the job's tuples that arrived by the state judged, of the judged windows'
    event time only (:func:`judged_windows`), comes from Spark tasks with each window's members
    (:func:`outoforder.spark.judge.exact_topk_windows`: two Spark jobs); the emitted lists and the
    late memberships of those windows are read on the driver.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(TopKJob)
    import numpy as np
    import pandas as pd
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, TOPK_LEDGER, TOPK_RESULTS
    from outoforder.spark.judge import exact_topk_windows

    j = judged_windows(ctx, until_us, since_us)
    lows = [lo for lo in (j.complete[0], j.closed[0]) if lo is not None]
    lo = min(lows) if len(lows) == 2 else None
    hi = max(j.complete[1], j.closed[1])
    bronze = delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source).where(
        (F.col("arrival_ts") < F.lit(j.as_of_us))
        & (F.col("event_ts") < F.lit(hi * job.slide_us + job.window_us))
    )
    if lo is not None:
        bronze = bronze.where(F.col("event_ts") >= F.lit((lo + 1) * job.slide_us))
    tuples = topk_tuples(bronze, job).where(F.col("score").isNotNull())
    wids = (None if lo is None else lo + 1, hi)
    truth = exact_topk_windows(tuples, job.windows(), job.k, wids).toPandas()
    results = _rows(ctx, TOPK_RESULTS, lo, hi, ["window_id", "rank", "seq"])
    late = _rows(ctx, TOPK_LEDGER, lo, hi, ["window_id", "seq", "arrival_us"], kind="late")
    late = late[late["arrival_us"] < j.as_of_us].drop_duplicates(["window_id", "seq"])
    members = truth.groupby("window_id")["members"].first()
    got = results.dropna(subset=["rank"])[["window_id", "seq"]].assign(hit=1)
    hits = truth.merge(got, on=["window_id", "seq"], how="left").fillna({"hit": 0})
    hit_rate = hits.groupby("window_id")["hit"].mean()
    # an emission is a list's first row (or the one row of a list emitted empty)
    emissions = results[results["rank"].isna() | (results["rank"] == 1)].groupby("window_id").size()
    frame = pd.DataFrame({"window_id": members.index.astype("int64")})
    frame["emissions"] = frame["window_id"].map(emissions).fillna(0).astype("int64")
    frame["all_late"] = frame["window_id"].map(late.groupby("window_id").size()).fillna(0).to_numpy() == (
        members.to_numpy()
    )
    frame["emitted_once"] = frame["emissions"] == 1
    frame["accounted"] = frame["emitted_once"] | frame["all_late"]
    frame["hit_rate"] = frame["window_id"].map(hit_rate).astype("float64")
    ids = frame["window_id"].to_numpy()

    def within(lo_: int | None, hi_: int) -> Any:
        return (ids <= hi_) & (np.ones_like(ids, dtype=bool) if lo_ is None else ids > lo_)

    frame["complete"] = within(*j.complete)
    frame["closed"] = within(*j.closed)
    if since_us is None and not len(frame):  # only windows without tuples were due: none emitted yet
        msg = f"{source}, job {job.job_id()}"
        raise NothingYet(msg)
    return frame


@retry_on_conflict
def validate_topk(
    ctx: StageContext,
    fail: bool | None = None,
    run_name: str | None = None,
    until_us: int | None = None,
    since_us: int | None = None,
) -> list[SuiteResult]:
    """GX: every window emitted once (or all its tuples late); closed windows' accuracy >= ε_min.

    Over the windows of the state at ``until_us`` (the newest when None), or with ``since_us`` only
    those emitted or closed after it (a DAG run's interval, see :func:`judged_windows`). Before the
    first emission there is nothing to check, and no accuracy verdict before the first window
    closes: both are reported, neither fails. ``fail`` None follows ``quality.on_violation``.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(TopKJob)
    import pandas as pd

    from outoforder.io.tables import TOPK_RESULTS
    from outoforder.quality.checkpoints import conclude, publish, run_checkpoint
    from outoforder.quality.measures import record_measures, with_latest_before

    try:
        # one row per window judged: the verdicts are computed in the driver, GX's included
        judged = window_accuracy(ctx, until_us, since_us)
    except NothingYet as e:
        from outoforder.io.tables import TOPK_STATE
        from outoforder.stages.passes import state_row
        from outoforder.stages.state import nothing_judged

        jid = job.job_id()
        if since_us is None or state_row(settings, TOPK_STATE, source, jid) is None:
            raise nothing_judged(spark, settings, TOPK_STATE, source, jid, "validate-topk", "window") from e
        log.info("[quality] no top-k window emitted yet (%s): nothing to check", e)
        return []
    judged = judged.sort_values("window_id", ignore_index=True)
    complete, closed = judged[judged["complete"]], judged[judged["closed"]]
    n_all, n_closed = len(complete), len(closed)
    frames = {"topk_completeness": complete}
    jid = job.job_id()
    if n_closed:  # the mean of no window is undefined; before the first closes there is no verdict
        # ε_min is a mean over windows: a run's few are judged with the job's latest before them
        frames["topk_accuracy"] = with_latest_before(
            settings, source, jid, "topk_hit_rate", closed, ("window_id", "hit_rate", None),
            settings.quality.windows_judged(job.slide_us) if since_us is not None else 0,
            _last_failed_window(ctx) if since_us is not None else None,
        )  # fmt: skip
    profiles = settled_profiles(ctx, closed["window_id"]) if n_closed else {}
    if profiles and job.latency_bound_us is not None:
        frames["topk_feasibility"] = pd.DataFrame(
            {
                "window_id": list(profiles),
                "reachable": [accuracy_at([p], job.bound_us) for p in profiles.values()],
            }
        )
    rows = [
        (int(w), None if pd.isna(h) else float(h))
        for w, h in zip(closed["window_id"], closed["hit_rate"], strict=True)
    ]
    items = None if since_us is None else ((rows[0][0], rows[-1][0]) if rows else (0, -1))
    record_measures(
        settings, source, jid, "topk_hit_rate",
        [
            (w, w * job.slide_us, w * job.slide_us + job.window_us, h, float(job.eps_min),
             h is not None and h >= job.eps_min)
            for w, h in rows
        ],
        items,
    )  # fmt: skip
    suites = run_checkpoint(
        settings, "topk", frames, source=source, job=jid, run_name=run_name, eps_min=job.eps_min
    )
    mean = closed["hit_rate"].mean() if n_closed else None
    acc = "no closed window" if mean is None or pd.isna(mean) else f"accuracy {mean:.4f}"
    together = frames.get("topk_accuracy")
    if together is not None and len(together) > n_closed:
        acc += f" (with the job's latest before them, {together['hit_rate'].mean():.4f} over {len(together)})"
    what = f"top-{job.k} {jid} of {source}: {n_all} windows, {n_closed} closed, {acc}"
    log.info("[validate-topk] %s (ε_min %s)", what, job.eps_min)
    judged_ok = {s.suite: s.success for s in suites}
    if judged_ok.get("topk_feasibility") is False:  # out of reach under the bound: say so, do not fail
        reach = accuracy_at(profiles.values(), job.bound_us)
        log.warning(
            "[validate-topk] %s: ε_min %s is out of reach under the bound of %g s (a cache waiting the "
            "whole bound reaches %.4f on the %d settled windows); it needs a bound of at least %g s "
            "(--latency-bound-s). Accuracy is reported, not failed.",
            what, job.eps_min, job.bound_us / 1e6, reach, len(profiles),
            needed_cache(profiles.values(), job.eps_min) / 1e6,
        )  # fmt: skip
    met = sum(h is not None and h >= job.eps_min for _, h in rows)
    publish(
        suites, TOPK_RESULTS.name, "topk_hit_rate", len(rows), met, eps_min=job.eps_min,
        accuracy=None if mean is None or pd.isna(mean) else float(mean), windows_emitted=n_all,
    )  # fmt: skip
    conclude(suites, what, settings.quality.fails(fail))
    return suites


def _last_failed_window(ctx: StageContext) -> int | None:
    """The newest window the check's newest failed verdict judged closed (None: none failed)."""
    from outoforder.stages.positions import failed_until

    failed = failed_until(ctx)
    standing = None if failed is None else _standings(ctx, failed, None)[0]
    return None if standing is None else standing[2]


def settled_profiles(ctx: StageContext, window_ids: Iterable[int]) -> dict[int, list[float]]:
    """The lateness of each settled window's true top-k (``silver/topk_ledger``), for these windows.

    One row of at most k numbers per window (a window settles once), read on the driver for the
    judged windows' range only: small by construction, like the per-window verdicts.
    """
    from outoforder.io.tables import TOPK_LEDGER

    ids = [int(w) for w in window_ids]
    if not ids:
        return {}
    rows = _rows(ctx, TOPK_LEDGER, min(ids) - 1, max(ids), ["window_id", "lateness"], kind="settled")
    wanted = set(ids)
    return {
        int(w): list(lateness)
        for w, lateness in zip(rows["window_id"], rows["lateness"], strict=True)
        if int(w) in wanted
    }
