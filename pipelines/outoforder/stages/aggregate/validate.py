"""``validate-aggregate``: Great Expectations on the aggregates against an exact recomputation of bronze.

Every window once (no duplicates; after a full repair, no gaps); the stream's error at emission
meets (ε, δ) (the share of windows with error < ε is at least 1 − δ); every window without
pending late tuples equals the exact value. The per-window errors go to the quality measures.

Under a latency bound (the job's ``max_k``) the check also asks whether (ε, δ) was reachable at
all: from the K each judged window needed (``silver/agg_ledger``'s observations: read off when its tuples
arrived, :mod:`outoforder.core.windows.lateness`), the share of windows a wait of the whole bound
would have let meet ε. A miss the bound allowed to avoid is the controller's shortfall and fails;
a miss the bound made unavoidable is a configuration matter: it is reported as a warning naming
the bound that (ε, δ) needed, and does not fail the task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from outoforder.core.windows.lateness import need_at
from outoforder.core.windows.quality import rank_error, relative_error
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages.aggregate.inputs import agg_tuples
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.context import StageContext
from outoforder.stages.state import where_job

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def judged_windows(
    ctx: StageContext,
    until_us: int | None,
    since_us: int | None,
) -> tuple[int, int, int | None]:
    """(horizon, newest window closed by ``until_us``, newest closed by ``since_us`` or None).

    A window is closed once the stream's frontier has passed its end. The frontier comes from the
    job's state at ``until_us`` (its newest state when None) and at ``since_us``.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(AggJob)
    from outoforder.io.tables import AGG_STATE
    from outoforder.stages.aggregate.stream import frontier_at
    from outoforder.stages.state import nothing_judged

    jid, w = job.job_id(), job.query().windows
    state = frontier_at(ctx, until_us)
    before = None if since_us is None else frontier_at(ctx, since_us)
    if state is None:
        raise nothing_judged(spark, settings, AGG_STATE, source, jid, "validate-aggregate", "window")
    as_of, frontier = state
    if frontier is None:  # passes ran, but nothing has arrived yet: no window closed
        log.info("[validate-aggregate] %s: no arrivals processed yet, no window closed", source)
        return as_of, -1, -1
    last = (frontier - w.size_us) // w.slide_us
    done = None if before is None or before[1] is None else (before[1] - w.size_us) // w.slide_us
    return as_of, last, done


def repaired_windows(ctx: StageContext) -> tuple[int, int]:
    """The windows the job's newest repair recomputed, ``(first, last)``; ``(0, -1)`` (none) before one."""
    from outoforder.io.tables import AGG_REPAIRS

    rows = _small(ctx, AGG_REPAIRS, [], ["repair_id", "first_window", "last_window"])
    if not rows:
        return 0, -1
    newest = max(rows, key=lambda r: str(r["repair_id"]))
    if newest["first_window"] is None:
        return 0, -1
    return int(newest["first_window"]), int(newest["last_window"])


def _small(ctx: StageContext, table: Any, filters: list[Any], columns: list[str]) -> list[dict[str, Any]]:
    """The job's rows of a small table matching ``filters``, read on the driver (no Spark job)."""
    from outoforder.io import deltars

    job = ctx.job_of(AggJob)
    mine = [("source", "=", ctx.bronze_source), ("job", "=", job.job_id()), *filters]
    got = deltars.read_table(table, ctx.settings.lake_root, ctx.settings.storage, mine, columns=columns)
    return [] if got is None else got.to_pylist()


def window_quality(
    ctx: StageContext,
    until_us: int | None = None,
    since_us: int | None = None,
    windows: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """Closed windows: the stream's and the current value against the exact one over bronze.

    Every window closed by ``until_us`` (the job's newest state when None), or with ``since_us``
    only those closed after it, or with ``windows = (first, last)`` only those ids: the tuples
    read are those of the judged windows' event time, their exact values are computed in Spark
    tasks (:func:`outoforder.spark.judge.exact_windows`: two Spark jobs), and the stored results
    and pending late tuples of those windows are read on the driver. Columns: wid, exact, n,
    stream_value, value, version, produced_by, pending (late tuples not yet repaired),
    stream_error, met_at_emission, exact_now.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(AggJob)
    import pandas as pd
    from pyspark.sql import functions as F

    from outoforder.core.windows.aggregate import parse_aggregate
    from outoforder.io import delta
    from outoforder.io.tables import AGG_LEDGER, AGG_RESULTS, BRONZE
    from outoforder.spark.judge import exact_windows
    from outoforder.stages.aggregate.ledger import repaired_upto

    horizon, last, done = judged_windows(ctx, until_us, since_us)
    if windows is not None:
        last, done = min(last, windows[1]), max(done if done is not None else -1, windows[0] - 1)
    w = job.query().windows
    first = None if done is None else done + 1
    in_range = [("window_id", "<=", last)] + ([] if first is None else [("window_id", ">=", first)])
    stored = pd.DataFrame(
        _small(ctx, AGG_RESULTS, in_range, ["window_id", "stream_value", "value", "version", "produced_by"]),
        columns=["window_id", "stream_value", "value", "version", "produced_by"],
    ).rename(columns={"window_id": "wid"})
    late = _small(
        ctx, AGG_LEDGER,
        [("kind", "=", "late"), ("arrival_us", ">=", repaired_upto(settings, source, job)), *in_range],
        ["window_id"],
    )  # fmt: skip
    pending = pd.Series([r["window_id"] for r in late], dtype="int64").value_counts().rename("pending")
    kind, q = parse_aggregate(job.aggregate)
    emitted = {
        int(wid): float(v)
        for wid, v in zip(stored["wid"], stored["stream_value"], strict=True)
        if pd.notna(v)
    }
    bronze = delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source).where(
        (F.col("arrival_ts") < F.lit(horizon)) & (F.col("event_ts") < F.lit(last * w.slide_us + w.size_us))
    )
    if first is not None:
        bronze = bronze.where(F.col("event_ts") >= F.lit(first * w.slide_us))
    exact = exact_windows(
        agg_tuples(bronze, job), w, job.aggregate, (first, last), emitted if kind == "quantile" else None
    ).toPandas()  # one row per judged window
    frame = (
        exact.merge(stored, on="wid", how="left")
        .merge(pending.rename_axis("wid").reset_index(), on="wid", how="left")
        .sort_values("wid")
        .reset_index(drop=True)
    )
    frame["pending"] = frame["pending"].fillna(0).astype("int64")
    values = frame["stream_value"].to_numpy(dtype=float)
    if kind == "quantile":
        err = rank_error(q, frame["below"].to_numpy(), frame["at"].to_numpy(), frame["n"].to_numpy())
    else:
        err = relative_error(values, frame["exact"].to_numpy(dtype=float))
    frame["stream_error"] = np.where(np.isnan(values), np.inf, err)
    frame["met_at_emission"] = frame["stream_error"] < job.eps
    same = np.isclose(frame["value"].to_numpy(float), frame["exact"].to_numpy(float), rtol=1e-9, atol=1e-12)
    frame["exact_now"] = same
    return frame.drop(columns=["below", "at"])


@retry_on_conflict
def validate_aggregate(
    ctx: StageContext,
    fail: bool | None = None,
    run_name: str | None = None,
    until_us: int | None = None,
    since_us: int | None = None,
    repaired: bool = False,
) -> list[Any]:
    """GX: windows unique; (ε, δ) at emission; windows without pending late tuples exact; no gaps.

    Over the windows closed by ``until_us`` (the newest state when None), or with ``since_us`` only
    those closed after it (a DAG run's interval), or with ``repaired`` only the windows the job's
    newest repair recomputed (what ``late_repair`` checks: the work follows the repair, not the
    history). ``fail`` None follows ``quality.on_violation``.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(AggJob)
    import pandas as pd

    from outoforder.io import delta
    from outoforder.io.tables import AGG_RESULTS
    from outoforder.quality.checkpoints import conclude, publish, run_checkpoint
    from outoforder.quality.measures import record_measures, with_latest_before

    jid = job.job_id()
    windows = repaired_windows(ctx) if repaired else None
    frame = window_quality(ctx, until_us, since_us, windows)
    if not len(frame) and since_us is None and windows is None:
        from outoforder.io.tables import AGG_STATE
        from outoforder.stages.state import nothing_judged

        raise nothing_judged(spark, settings, AGG_STATE, source, jid, "validate-aggregate", "window")
    results: DataFrame | pd.DataFrame = delta.read(spark, AGG_RESULTS, settings.lake_root).where(
        where_job(source, jid)
    )
    items = None
    if since_us is not None or windows is not None:  # replaces and checks the windows it judged
        items = (int(frame["wid"].min()), int(frame["wid"].max())) if len(frame) else (0, -1)
        # their stored rows are a few per window judged: read and judged in the driver
        columns = AGG_RESULTS.schema.fieldNames()
        rows = _small(
            ctx, AGG_RESULTS, [("window_id", ">=", items[0]), ("window_id", "<=", items[1])], columns
        )
        results = pd.DataFrame(rows, columns=columns)
    settled = frame[frame["pending"] == 0]
    # one row per window judged, in the driver already: GX judges it there
    wid_col = frame["wid"].astype("int64")
    frames: dict[str, Any] = {
        "agg_results": results,
        # (ε, δ) is a share of windows: a run's are judged with the job's latest before them
        "agg_error": with_latest_before(
            settings,
            source,
            jid,
            "agg_error",
            pd.DataFrame({"wid": wid_col, "met_at_emission": frame["met_at_emission"].astype(bool)}),
            ("wid", None, "met_at_emission"),
            settings.quality.windows_judged(job.slide_us) if since_us is not None else 0,
            _last_failed_window(ctx) if since_us is not None else None,
        ),
        "agg_quality": pd.DataFrame(
            {
                "wid": wid_col,
                "present_if_settled": (frame["value"].notna() | (frame["pending"] > 0)).astype(bool),
                "exact_if_settled": np.where(frame["pending"] == 0, frame["exact_now"], True).astype(bool),
            }
        ),
    }
    if windows is not None:
        # the repaired windows are those late tuples reached: a biased sample for (ε, δ) at
        # emission, which the stream's own checks judge over every window as it closes
        del frames["agg_error"]
    needs = window_needs(ctx, wid_col) if job.latency_bound_us is not None and windows is None else {}
    if needs:
        frames["agg_feasibility"] = pd.DataFrame(
            {
                "wid": list(needs),
                "within_bound": [n <= int(job.latency_bound_us or 0) for n in needs.values()],
            }
        )
    met_share = float(frame["met_at_emission"].mean()) if len(frame) else 1.0
    wids = frame["wid"].to_numpy(dtype="int64")
    starts = wids * job.slide_us  # window i covers [i·slide, i·slide + size)
    errors = frame["stream_error"].to_numpy(dtype=float)
    if windows is None:  # a repair changes values, not the error at emission
        record_measures(
            settings, source, jid, "agg_error",
            [
                (int(w), int(s), int(s) + job.window_us, None if not np.isfinite(e) else float(e),
                 float(job.eps), bool(m))
                for w, s, e, m in zip(wids, starts, errors, frame["met_at_emission"], strict=True)
            ],
            items,
        )  # fmt: skip
    suites = run_checkpoint(
        settings, "aggregate", frames, source=source, job=jid, run_name=run_name, delta=job.delta
    )
    together = frames.get("agg_error")
    earlier = (
        f" (with the job's latest before them, {100 * together['met_at_emission'].mean():.2f}% of "
        f"{len(together):,})"
        if together is not None and len(together) > len(frame)
        else ""
    )
    log.info(
        "[validate-aggregate] %s (%s): %s closed windows; %.2f%% met ε = %s at emission%s "
        "(target >= %.0f%%); %s without pending late tuples, %s of them exact; %s missing",
        source, jid, f"{len(frame):,}", 100 * met_share, job.eps, earlier, 100 * (1 - job.delta),
        f"{len(settled):,}", f"{int(settled['exact_now'].sum()):,}", f"{int(frame['value'].isna().sum()):,}",
    )  # fmt: skip
    if {s.suite: s.success for s in suites}.get("agg_feasibility") is False:
        values = list(needs.values())
        within = sum(n <= int(job.latency_bound_us or 0) for n in values) / len(values)
        needed = need_at(values, 1.0 - job.delta) or 0
        log.warning(
            "[validate-aggregate] %s (%s): (ε, δ) = (%s, %s) is out of reach under the bound of %g s (a "
            "wait of the whole bound lets %.2f%% of the %d windows with a known need meet ε); it needs a "
            "bound of at least %g s (--latency-bound-s). The error at emission is reported, not failed.",
            source, jid, job.eps, job.delta, (job.latency_bound_us or 0) / 1e6, 100 * within, len(values),
            needed / 1e6,
        )  # fmt: skip
    publish(
        suites, AGG_RESULTS.name, "agg_repair" if windows is not None else "agg_error", len(frame),
        int(frame["met_at_emission"].sum()) if windows is None else int(settled["exact_now"].sum()),
        eps=job.eps, delta=job.delta, settled=len(settled), exact=int(settled["exact_now"].sum()),
        missing=int(frame["value"].isna().sum()),
    )  # fmt: skip
    conclude(suites, "aggregates", settings.quality.fails(fail))
    return suites


def _last_failed_window(ctx: StageContext) -> int | None:
    """The newest window the check's newest failed verdict judged (None: none failed)."""
    from outoforder.stages.aggregate.stream import frontier_at
    from outoforder.stages.positions import failed_until

    failed = failed_until(ctx)
    state = None if failed is None else frontier_at(ctx, failed)
    if state is None or state[1] is None:
        return None
    w = ctx.job_of(AggJob).query().windows
    return (state[1] - w.size_us) // w.slide_us


def window_needs(ctx: StageContext, window_ids: Iterable[int]) -> dict[int, int]:
    """The K each of these windows needed (µs), from its coverage observation in ``silver/agg_ledger``.

    One row per observed window, read on the driver for the judged windows' range only: small by
    construction, like the per-window verdicts. Windows not observed yet (or before needs were
    kept) are left out.
    """
    from outoforder.io.tables import AGG_LEDGER

    ids = [int(w) for w in window_ids]
    if not ids:
        return {}
    rows = _small(
        ctx, AGG_LEDGER,
        [("kind", "=", "observed"), ("window_id", ">=", min(ids)), ("window_id", "<=", max(ids))],
        ["window_id", "needed_us"],
    )  # fmt: skip
    wanted = set(ids)
    return {
        int(r["window_id"]): int(r["needed_us"])
        for r in rows
        if r["needed_us"] is not None and int(r["window_id"]) in wanted
    }
