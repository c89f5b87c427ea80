"""The data-quality report's sections: one per operator and one for the inputs, from the lake's tables.

A section is a few panels (a plot with its explanation, or a table) over one window of arrival
time (:class:`Window`); :class:`LakeTables` reads each table the report uses once. The page itself
(headline, validations, HTML) is :mod:`outoforder.quality.report`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from outoforder.quality.panels import (
    COLOURS,
    LakeTables,
    Panel,
    Section,
    Window,
    figure,
    html_table,
    jobs,
    measure_panel,
    seconds,
    steps_panel,
    svg,
)

if TYPE_CHECKING:
    pass


def _join_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import JOIN_PARAMS, JOIN_RESULTS, QUALITY_MEASURES

    measures = w.keep(lake.get(QUALITY_MEASURES, where=w.filters("end_us")), "end_us")
    recall = measures[measures["measure"] == "join_recall"]
    params = w.keep(
        lake.get(
            JOIN_PARAMS,
            ["source", "job", "valid_from_us", "d_r_us", "d_s_us", "stats_json"],
            w.filters("valid_from_us"),
        ),
        "valid_from_us",
    )
    stats = [json.loads(t) if isinstance(t, str) else {} for t in params["stats_json"]]
    params = params.assign(
        r=[st.get("buffered_r") for st in stats], s=[st.get("buffered_s") for st in stats]
    ).drop(columns=["stats_json"])
    # a run's page: the pairs its interval emitted; the cumulative page: every pair, the repair's too
    results = lake.counts(JOIN_RESULTS, ["source", "job", "produced_by"], w.filters("emitted_at_us"))
    if recall.empty and params.empty:
        return None
    s = Section(
        "Stream join (QJoin)",
        "The stream join pairs tuples of two streams that are close in time and space, emitting each pair "
        "the moment its second tuple arrives. Tuples arrive out of order, so each stream keeps a buffer of "
        "recent tuples; the buffer's time span (the retention d) is chosen so that, per period, the join "
        "finds at least the share Q_user of the pairs an exact join would find (its recall). Smaller "
        "retentions use less memory but miss more pairs.",
    )
    for source, job, part in jobs(recall):
        s.panels.append(measure_panel(part, f"{source} · {job}: periods", "recall", True))
    for source, job, part in jobs(params):
        s.panels.append(
            steps_panel(
                part, "valid_from_us",
                {"d_R (ms)": lambda f: f["d_r_us"] / 1e3, "d_S (ms)": lambda f: f["d_s_us"] / 1e3},
                "retention (ms)", f"{source} · {job}: retention in force",
                "How far back in event time each stream's buffer reaches, as re-chosen every L of stream "
                "progress from what arrived before (step = in force from that arrival time on).",
            )
        )  # fmt: skip
        s.panels.append(
            steps_panel(
                part.fillna({"r": 0, "s": 0}), "valid_from_us",
                {"R tuples": lambda f: f["r"], "S tuples": lambda f: f["s"]},
                "tuples buffered", f"{source} · {job}: buffered tuples (memory)",
                "Tuples held in each stream's buffer at every decision of the controller: the memory the "
                "recall target costs. Pairs are emitted on arrival, so the join adds no waiting latency.",
                step=False,
            )
        )  # fmt: skip
    if not results.empty:
        counts = results.groupby(["source", "job", "produced_by"])["rows"].sum().rename("pairs").reset_index()
        s.panels.append(
            Panel(
                "Pairs by producer",
                "Pairs found by the stream itself, and pairs added later by the repair from the stored "
                "history.",
                table=html_table(counts),
            )
        )
    return s


def _aggregate_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import AGG_LEDGER, AGG_REPAIRS, AGG_RESULTS, AGG_STATE, QUALITY_MEASURES

    measures = w.keep(lake.get(QUALITY_MEASURES, where=w.filters("end_us")), "end_us")
    errors = measures[measures["measure"] == "agg_error"]
    ledger = lake.get(
        AGG_LEDGER,
        ["source", "job", "kind", "window_id", "seq", "arrival_us", "needed_us", "slack_after_us"],
        [("kind", "=", "observed"), *w.filters("arrival_us")],
    )
    control = w.keep(ledger, "arrival_us")
    kept = lake.counts(AGG_STATE, ["source", "job", "as_of_us", "kind"], w.filters("as_of_us"))
    buffers = w.keep(kept[kept["kind"] != "state"], "as_of_us")
    results = lake.get(
        AGG_RESULTS,
        [
            "source",
            "job",
            "window_id",
            "window_end_us",
            "version",
            "produced_by",
            "slack_us",
            "written_by_us",
        ],
        w.filters("written_by_us"),
    )
    results = w.keep(results, "written_by_us")
    repairs = w.keep(lake.get(AGG_REPAIRS, where=w.filters("repair_id")), "repair_id")
    if errors.empty and control.empty and results.empty:
        return None
    s = Section(
        "Sliding-window aggregates (HPM)",
        "Each sliding window's aggregate (e.g. a sum) is emitted once the stream has passed the window's "
        "end by a slack K. Late tuples that arrive after that are missed, so the value may be off; the "
        "target (ε, δ) asks that at most a share δ of the windows be off by more than a relative error ε. "
        "A controller adjusts K to meet it with the least waiting: by default to what the recent windows "
        "needed, or, with the paper's controller, as a share α of the largest delay seen. "
        "Late tuples are recorded, and a batch repair later recomputes the windows they belong to, so every "
        "result becomes exact.",
    )
    for source, job, part in jobs(errors):
        s.panels.append(
            measure_panel(part, f"{source} · {job}: windows", "relative error at emission", False, True)
        )
    emitted = results.dropna(subset=["slack_us"])
    for source, job, part in jobs(emitted):
        fig, ax = figure(
            "slack K at emission (ms)", "event time of the window's end (seconds from the first)"
        )
        part = part.sort_values("window_end_us")
        ax.plot(seconds(part["window_end_us"], int(part["window_end_us"].min())), part["slack_us"] / 1e3,
                color=COLOURS[0], marker=".", ms=3, lw=1)  # fmt: skip
        s.panels.append(
            Panel(
                f"{source} · {job}: slack K (waiting time)",
                "How long past each window's end the stream waited before emitting it: the latency the "
                "error target costs, as the controller set it.",
                svg=svg(fig),
            )
        )
    for source, job, part in jobs(control):
        part = part.sort_values("seq")
        if part["needed_us"].notna().any():
            fig, ax = figure("K (ms)", "coverage observations, in arrival order")
            x = range(len(part))
            ax.plot(x, part["needed_us"] / 1e3, ".", ms=3, color=COLOURS[1], label="K the window needed")
            ax.step(x, part["slack_after_us"] / 1e3, where="post", color=COLOURS[0], label="K after it")
            ax.legend(fontsize=7)
            s.panels.append(
                Panel(
                    f"{source} · {job}: the K each window needed",
                    "Each observed window's need: the shortest constant wait under which its result would "
                    "have been within ε, read off when its tuples arrived; and the controller's K after "
                    "it (the lateness controller: what a high share of the recent windows needed, capped "
                    "at the job's bound; the paper's: α times the largest delay seen). Needs above the "
                    "bound are windows the bound put out of reach.",
                    svg=svg(fig),
                )
            )
    for source, job, part in jobs(buffers):
        sizes = part.groupby("as_of_us")["rows"].sum().rename("n").reset_index()
        s.panels.append(
            steps_panel(
                sizes, "as_of_us", {"tuples": lambda f: f["n"]}, "tuples buffered",
                f"{source} · {job}: buffered tuples (memory)",
                "Values held for windows not emitted yet and windows awaiting their coverage, at the end "
                "of each pass.", step=False,
            )
        )  # fmt: skip
    if not results.empty:
        versions = (
            results.groupby(["source", "job"])
            .agg(
                windows=("window_id", "nunique"),
                repaired=("version", lambda v: int((v > 1).sum())),
                max_version=("version", "max"),
            )
            .reset_index()
        )
        s.panels.append(
            Panel(
                "Versions",
                "Windows stored, how many a repair changed (version > 1), and the highest version.",
                table=html_table(versions),
            )
        )
        fixed = results[results["version"] > 1]
        if not fixed.empty:
            # the repair id is the ledger's arrival time; replays share one clock for both times
            tte = ((fixed["written_by_us"] - fixed["window_end_us"]) / 1e6).describe()[
                ["count", "mean", "50%", "max"]
            ]
            s.panels.append(
                Panel(
                    "Time to exact",
                    "For repaired windows: arrival time from the window's end to the repair that made it "
                    "exact, in seconds.",
                    table=html_table(
                        tte.rename("seconds").reset_index().rename(columns={"index": "statistic"})
                    ),
                )
            )
    if not repairs.empty:
        cols = ["source", "job", "repair_id", "trigger", "late_tuples", "windows", "windows_changed",
                "windows_added", "rows_read", "seconds"]  # fmt: skip
        s.panels.append(
            Panel(
                "Repair activity",
                "Each repair run: why it ran (Γ: the pending late tuples spanned more than Γ; forced), the "
                "late tuples it applied, the windows it recomputed and changed, and what it read.",
                table=html_table(repairs[cols].sort_values("repair_id")),
            )
        )
    return s


def _topk_section(lake: LakeTables, w: Window) -> Section | None:
    import pandas as pd

    from outoforder.io.tables import QUALITY_MEASURES, TOPK_LEDGER, TOPK_RESULTS

    measures = w.keep(lake.get(QUALITY_MEASURES, where=w.filters("end_us")), "end_us")
    hits = measures[measures["measure"] == "topk_hit_rate"]
    ledger = lake.get(
        TOPK_LEDGER,
        ["source", "job", "kind", "arrival_us", "progress_us", "k_min_us"],
        [("kind", "=", "decision"), *w.filters("arrival_us")],
    )
    cache = w.keep(ledger, "arrival_us")
    emissions = lake.get(
        TOPK_RESULTS,
        ["source", "job", "window_id", "emitted_at_us", "cache_us", "rank"],
        w.filters("emitted_at_us"),
    )
    windows = w.keep(emissions[emissions["rank"].isna() | (emissions["rank"] == 1)], "emitted_at_us")
    late = w.keep(
        lake.counts(
            TOPK_LEDGER,
            ["source", "job", "kind", "arrival_us", "window_id"],
            [("kind", "=", "late"), *w.filters("arrival_us")],
        ),
        "arrival_us",
    )
    if hits.empty and cache.empty and windows.empty:
        return None
    s = Section(
        "Continuous top-k",
        "For every sliding window the k highest scores are emitted once the stream has passed the window's "
        "end by a cache duration K. Tuples later than K are missed; the accuracy of a window is the share of "
        "its exact top-k that the emitted list contains. K adapts so that the accuracy stays at ε_min or "
        "above with the least waiting.",
    )
    for source, job, part in jobs(hits):
        s.panels.append(measure_panel(part, f"{source} · {job}: closed windows", "accuracy (hit rate)", True))
    for source, job, part in jobs(cache):
        s.panels.append(
            steps_panel(
                part, "progress_us", {"K (s)": lambda f: f["k_min_us"] / 1e6}, "cache duration K (s)",
                f"{source} · {job}: cache duration (waiting time)",
                "The cache duration chosen at each decision (x: the stream's progress in event time).",
            )
        )  # fmt: skip
    for source, job, part in jobs(windows):
        late_n = late[(late["source"] == source) & (late["job"] == job)].groupby("window_id")["rows"].sum()
        rows = part.assign(late=part["window_id"].map(late_n).fillna(0).astype("int64"))
        stats = {
            "windows emitted": len(rows),
            "mean K at emission (s)": round(float(rows["cache_us"].mean()) / 1e6, 4),
            "late memberships": int(rows["late"].sum()),
            "windows with late tuples": int((rows["late"] > 0).sum()),
        }
        s.panels.append(
            Panel(
                f"{source} · {job}: emissions",
                "Windows emitted, the waiting time in force when they were, and tuples that arrived after "
                "their window was emitted (reported, never dropped silently).",
                table=html_table(pd.DataFrame([stats])),
            )
        )
    return s


def _theta_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import THETA_WINDOWS

    wins = w.keep(lake.get(THETA_WINDOWS, where=w.filters("window_end_us")), "window_end_us")
    if wins.empty:
        return None
    s = Section(
        "θ-join backfills",
        "Backfills join several streams with inequality or band conditions (θ-joins) over event-time windows "
        "of the stored history. FastThetaJoin splits values into ranges and compares only range pairs that "
        "can match; 'rows compared' shows the work it did against the output it produced.",
    )
    agg = (
        wins.groupby(["source", "job", "method"])
        .agg(windows=("window_start_us", "count"), output_rows=("output_rows", "sum"),
             rows_compared=("rows_compared", "sum"), seconds=("seconds", "sum"))
        .reset_index()
    )  # fmt: skip
    s.panels.append(
        Panel(
            "Backfilled windows",
            "Per job and method: windows run, rows out, work done.",
            table=html_table(agg),
        )
    )
    return s


def _inputs_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import INGEST_LOG, QUARANTINE

    log = lake.get(INGEST_LOG, where=[("status", "=", "done")])
    quarantine = lake.counts(QUARANTINE, ["source", "reason"])
    if log.empty and quarantine.empty:
        return None
    s = Section(
        "Inputs",
        "Every line of every ingested file is either stored (accepted) or put in quarantine with a reason; "
        "nothing is dropped silently.",
    )
    if not log.empty:
        cols = ["source", "source_file", "reader", "lines", "rows_accepted", "rows_quarantined"]
        s.panels.append(
            Panel("Files ingested", "One row per file.", table=html_table(log[cols].sort_values("source")))
        )
    if not quarantine.empty:
        counts = quarantine.groupby(["source", "reason"])["rows"].sum().rename("rows").reset_index()
        fig, ax = figure("rows quarantined", "")
        by_reason = counts.groupby("reason")["rows"].sum().sort_values()
        ax.barh(by_reason.index.astype(str), by_reason.to_numpy(), color=COLOURS[1])
        ax.set_xlabel("rows")
        ax.set_ylabel("")
        s.panels.append(
            Panel(
                "Quarantine by reason",
                "Rows set aside, by reason (all sources).",
                svg=svg(fig),
                table=html_table(counts),
            )
        )
    else:
        s.panels.append(Panel("Quarantine by reason", "No row has been quarantined."))
    return s


SECTIONS: dict[str, Callable[[LakeTables, Window], Section | None]] = {
    "join": lambda lake, w: _join_section(lake, w),
    "aggregate": lambda lake, w: _aggregate_section(lake, w),
    "topk": lambda lake, w: _topk_section(lake, w),
    "theta": lambda lake, w: _theta_section(lake, w),
    "inputs": lambda lake, w: _inputs_section(lake, w),
}
