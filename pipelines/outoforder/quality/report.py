"""The data-quality report: one self-contained HTML page (inline SVG plots), cumulative and per run.

It reads only tables the stages and validations already wrote (``gold/quality_measures``,
``gold/quality_runs``, the operators' parameter traces, buffers, repairs and the quarantine) and
explains each figure in plain words, for readers who have not read the papers behind the operators.

A per-run page keeps the rows of one arrival-time interval ``[start, end)``: parameter traces and
buffers by the arrival time they were recorded at, judged periods and windows by their end (the
replays share one clock for event and arrival time), validations by run name.
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import REPO_ROOT, Settings
from outoforder.errors import ConfigError
from outoforder.quality.checkpoints import safe_run_name
from outoforder.quality.suites import SUITES, out_of_reach

log = logging.getLogger(__name__)
if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

TEMPLATE = REPO_ROOT / "include" / "templates" / "quality_report.html.j2"

TARGET = "#c0392b"  # the target line, in every plot
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")


@dataclass
class Panel:
    """One figure or table with the sentence that explains it."""

    title: str
    explain: str
    svg: str = ""
    table: str = ""


@dataclass
class Section:
    """One operator (or the inputs): a headline row per job and its panels."""

    title: str
    intro: str
    panels: list[Panel] = field(default_factory=list)


@dataclass(frozen=True)
class Window:
    """The arrival-time interval a per-run report covers (None: everything)."""

    start_us: int | None = None
    end_us: int | None = None
    run_name: str | None = None

    def keep(self, frame: pd.DataFrame, col: str) -> pd.DataFrame:
        """The rows of ``frame`` whose ``col`` lies in the interval."""
        if self.start_us is not None:
            frame = frame[frame[col] >= self.start_us]
        if self.end_us is not None:
            frame = frame[frame[col] < self.end_us]
        return frame


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog: the SVG sits inside the HTML


def _figure(ylabel: str, xlabel: str = "seconds") -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 2.8))
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _seconds(values: Any, origin: int) -> Any:
    return (values.astype("float64") - origin) / 1e6


def _table(frame: pd.DataFrame, max_rows: int = 200) -> str:
    shown = frame.head(max_rows)
    more = (
        f"<p class='note'>{len(frame) - max_rows:,} more rows not shown.</p>" if len(frame) > max_rows else ""
    )
    return (
        shown.to_html(index=False, border=0, classes="data", escape=True, float_format=lambda v: f"{v:,.4g}")
        + more
    )


def _clock(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


class LakeTables:
    """Reads tables once each, as pandas frames (empty when a table does not exist yet).

    One instance serves every page and the headline of one report run.
    """

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark, self.settings = spark, settings
        self._cache: dict[str, pd.DataFrame] = {}

    def get(self, table: Any, columns: list[str] | None = None) -> pd.DataFrame:
        """The table (only ``columns`` when given) as read the first time it was asked for."""
        return self._read(
            table,
            table.name,
            lambda df: df.select(*(columns or df.columns)),
            columns or table.schema.fieldNames(),
        )

    def counts(self, table: Any, by: list[str]) -> pd.DataFrame:
        """Rows of ``table`` per value of ``by`` (column ``rows``), counted by Spark.

        Tables of tuples or pairs are never brought to the driver, only their counts.
        """
        return self._read(
            table, f"{table.name}#{','.join(by)}",
            lambda df: df.groupBy(*by).count().withColumnRenamed("count", "rows"), [*by, "rows"],
        )  # fmt: skip

    def _read(
        self, table: Any, name: str, shape: Callable[[DataFrame], DataFrame], empty: list[str]
    ) -> pd.DataFrame:
        """``shape`` of the table as pandas, cached under ``name``; no rows (columns ``empty``) if absent."""
        import pandas as pd

        from outoforder.io import delta

        if name not in self._cache:
            if delta.exists(self.spark, table, self.settings.lake_root):
                self._cache[name] = shape(delta.read(self.spark, table, self.settings.lake_root)).toPandas()
            else:
                self._cache[name] = pd.DataFrame(columns=empty)
        return self._cache[name]


def _jobs(frame: pd.DataFrame) -> Iterator[tuple[str, str, pd.DataFrame]]:
    for (source, job), part in frame.groupby(["source", "job"], sort=True):
        yield str(source), str(job), part


def _measure_panel(
    part: pd.DataFrame, what: str, ylabel: str, higher_is_better: bool, log: bool = False
) -> Panel:
    part = part.sort_values("end_us")
    origin = int(part["start_us"].min())
    fig, ax = _figure(ylabel, "event time of the end (seconds from the first)")
    x = _seconds(part["end_us"], origin)
    values = part["value"].astype("float64")
    met = part["met"].astype(bool)
    ax.plot(x, values, color=COLOURS[0], lw=1, alpha=0.6)
    ax.scatter(x[met], values[met], s=10, color=COLOURS[2], label="target met", zorder=3)
    ax.scatter(x[~met], values[~met], s=14, color=TARGET, marker="x", label="target missed", zorder=3)
    target = float(part["target"].iloc[-1])
    ax.axhline(target, color=TARGET, ls="--", lw=1, label=f"target {target:g}")
    if log:
        ax.set_yscale("symlog", linthresh=max(target / 100, 1e-6))
    ax.legend(loc="lower right" if higher_is_better else "upper right", fontsize=8)
    share = float(met.mean()) if len(met) else float("nan")
    explain = (
        f"{what} {len(part):,} judged, {int(met.sum()):,} meet the target ({share:.1%}). Each dot is one "
        f"{'period' if 'period' in what else 'window'}; the dashed line is the target "
        f"({'at or above' if higher_is_better else 'below'} it is good)."
    )
    return Panel(f"{ylabel} against the target", explain, svg=_svg(fig))


def _steps_panel(
    frame: pd.DataFrame, x: str, series: Mapping[str, Callable[..., Any]], ylabel: str, title: str,
    explain: str, origin: int | None = None, step: bool = True,
) -> Panel:  # fmt: skip
    frame = frame.sort_values(x)
    origin = int(frame[x].min()) if origin is None else origin
    fig, ax = _figure(ylabel, "arrival time (seconds from the first shown)")
    xs = _seconds(frame[x], origin)
    for (label, fn), colour in zip(series.items(), COLOURS, strict=False):
        if step:
            ax.step(xs, fn(frame), where="post", label=label, color=colour)
        else:
            ax.plot(xs, fn(frame), label=label, color=colour, marker=".", ms=3, lw=1)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return Panel(title, explain, svg=_svg(fig))


def _join_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import JOIN_BUFFER, JOIN_PARAMS, JOIN_RESULTS, QUALITY_MEASURES

    measures = w.keep(lake.get(QUALITY_MEASURES), "end_us")
    recall = measures[measures["measure"] == "join_recall"]
    params = w.keep(lake.get(JOIN_PARAMS), "valid_from_us")
    buffers = w.keep(lake.counts(JOIN_BUFFER, ["source", "job", "as_of_us", "side"]), "as_of_us")
    results = lake.counts(JOIN_RESULTS, ["source", "job", "produced_by", "interval_end_us"])
    results = w.keep(results, "interval_end_us")
    if recall.empty and params.empty and buffers.empty:
        return None
    s = Section(
        "Stream join (QJoin)",
        "The stream join pairs tuples of two streams that are close in time and space, emitting each pair "
        "the moment its second tuple arrives. Tuples arrive out of order, so each stream keeps a buffer of "
        "recent tuples; the buffer's time span (the retention d) is chosen so that, per period, the join "
        "finds at least the share Q_user of the pairs an exact join would find (its recall). Smaller "
        "retentions use less memory but miss more pairs.",
    )
    for source, job, part in _jobs(recall):
        s.panels.append(_measure_panel(part, f"{source} · {job}: periods", "recall", True))
    for source, job, part in _jobs(params):
        s.panels.append(
            _steps_panel(
                part, "valid_from_us",
                {"d_R (ms)": lambda f: f["d_r_us"] / 1e3, "d_S (ms)": lambda f: f["d_s_us"] / 1e3},
                "retention (ms)", f"{source} · {job}: retention in force",
                "How far back in event time each stream's buffer reaches, as re-chosen by each adaptation "
                "from the delays seen so far (step = in force from that arrival time on).",
            )
        )  # fmt: skip
    for source, job, part in _jobs(buffers):
        sizes = part.pivot_table(index="as_of_us", columns="side", values="rows", fill_value=0).reset_index()
        series = {f"{'R' if int(c) == 0 else 'S'} tuples": (lambda f, c=c: f[c]) for c in sizes.columns[1:]}
        s.panels.append(
            _steps_panel(
                sizes, "as_of_us", series, "tuples buffered", f"{source} · {job}: buffered tuples (memory)",
                "Tuples held in each stream's buffer at the end of every interval: the memory the recall "
                "target costs. Pairs are emitted on arrival, so the join adds no waiting latency.",
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
                table=_table(counts),
            )
        )
    return s


def _aggregate_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import (
        AGG_BUFFER,
        AGG_CONTROL,
        AGG_REPAIRS,
        AGG_RESULTS,
        QUALITY_MEASURES,
    )

    measures = w.keep(lake.get(QUALITY_MEASURES), "end_us")
    errors = measures[measures["measure"] == "agg_error"]
    control = w.keep(lake.get(AGG_CONTROL), "interval_end_us")
    buffers = w.keep(lake.counts(AGG_BUFFER, ["source", "job", "as_of_us"]), "as_of_us")
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
    )
    results = w.keep(results, "written_by_us")
    repairs = w.keep(lake.get(AGG_REPAIRS), "repair_id")
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
    for source, job, part in _jobs(errors):
        s.panels.append(
            _measure_panel(part, f"{source} · {job}: windows", "relative error at emission", False, True)
        )
    emitted = results.dropna(subset=["slack_us"])
    for source, job, part in _jobs(emitted):
        fig, ax = _figure(
            "slack K at emission (ms)", "event time of the window's end (seconds from the first)"
        )
        part = part.sort_values("window_end_us")
        ax.plot(_seconds(part["window_end_us"], int(part["window_end_us"].min())), part["slack_us"] / 1e3,
                color=COLOURS[0], marker=".", ms=3, lw=1)  # fmt: skip
        s.panels.append(
            Panel(
                f"{source} · {job}: slack K (waiting time)",
                "How long past each window's end the stream waited before emitting it: the latency the "
                "error target costs, as the controller set it.",
                svg=_svg(fig),
            )
        )
    for source, job, part in _jobs(control):
        part = part.sort_values(["interval_end_us", "obs_at_seq"])
        if "needed_us" in part and part["needed_us"].notna().any():
            fig, ax = _figure("K (ms)", "coverage observations, in arrival order")
            x = range(len(part))
            ax.plot(x, part["needed_us"] / 1e3, ".", ms=3, color=COLOURS[1], label="K the window needed")
            ax.step(x, part["slack_after_us"] / 1e3, where="post", color=COLOURS[0], label="K after it")
            ax.legend(fontsize=7)
            s.panels.append(
                Panel(
                    f"{source} · {job}: the K each window needed",
                    "Each observed window's need: the shortest constant wait under which its result would "
                    "have been within ε, read off when its tuples arrived; and the lateness controller's "
                    "K after it (what a high share of the recent windows needed, capped at the job's "
                    "bound). Needs above the bound are windows the bound put out of reach.",
                    svg=_svg(fig),
                )
            )
            continue
        fig, ax = _figure("α", "coverage observations, in arrival order")
        ax.step(range(len(part)), part["alpha_after"], where="post", color=COLOURS[0])
        s.panels.append(
            Panel(
                f"{source} · {job}: controller α",
                "The controller's output after each coverage observation (K = α · the largest delay seen): "
                "it lowers α while windows are covered well enough and raises it when they are not.",
                svg=_svg(fig),
            )
        )
    for source, job, part in _jobs(buffers):
        sizes = part.groupby("as_of_us")["rows"].sum().rename("n").reset_index()
        s.panels.append(
            _steps_panel(
                sizes, "as_of_us", {"tuples": lambda f: f["n"]}, "tuples buffered",
                f"{source} · {job}: buffered tuples (memory)",
                "Tuples held for windows not emitted yet, at the end of every interval.", step=False,
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
                table=_table(versions),
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
                    table=_table(tte.rename("seconds").reset_index().rename(columns={"index": "statistic"})),
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
                table=_table(repairs[cols].sort_values("repair_id")),
            )
        )
    return s


def _topk_section(lake: LakeTables, w: Window) -> Section | None:
    import pandas as pd

    from outoforder.io.tables import QUALITY_MEASURES, TOPK_CACHE, TOPK_LATE, TOPK_WINDOWS

    measures = w.keep(lake.get(QUALITY_MEASURES), "end_us")
    hits = measures[measures["measure"] == "topk_hit_rate"]
    cache = w.keep(lake.get(TOPK_CACHE), "progress_us")
    windows = w.keep(lake.get(TOPK_WINDOWS), "interval_start_us")
    late = w.keep(
        lake.counts(TOPK_LATE, ["source", "job", "interval_start_us", "window_id"]), "interval_start_us"
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
    for source, job, part in _jobs(hits):
        s.panels.append(
            _measure_panel(part, f"{source} · {job}: closed windows", "accuracy (hit rate)", True)
        )
    for source, job, part in _jobs(cache):
        s.panels.append(
            _steps_panel(
                part, "progress_us", {"K (s)": lambda f: f["k_min_us"] / 1e6}, "cache duration K (s)",
                f"{source} · {job}: cache duration (waiting time)",
                "The cache duration chosen at each decision (x: the stream's progress in event time).",
            )
        )  # fmt: skip
    for source, job, part in _jobs(windows):
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
                table=_table(pd.DataFrame([stats])),
            )
        )
    return s


def _theta_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import THETA_WINDOWS

    wins = w.keep(lake.get(THETA_WINDOWS), "window_end_us")
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
            "Backfilled windows", "Per job and method: windows run, rows out, work done.", table=_table(agg)
        )
    )
    return s


def _inputs_section(lake: LakeTables, w: Window) -> Section | None:
    from outoforder.io.tables import INGEST_LOG, QUARANTINE

    log = lake.get(INGEST_LOG)
    log = log[log["status"] == "done"] if not log.empty else log
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
            Panel("Files ingested", "One row per file.", table=_table(log[cols].sort_values("source")))
        )
    if not quarantine.empty:
        counts = quarantine.groupby(["source", "reason"])["rows"].sum().rename("rows").reset_index()
        fig, ax = _figure("rows quarantined", "")
        by_reason = counts.groupby("reason")["rows"].sum().sort_values()
        ax.barh(by_reason.index.astype(str), by_reason.to_numpy(), color=COLOURS[1])
        ax.set_xlabel("rows")
        ax.set_ylabel("")
        s.panels.append(
            Panel(
                "Quarantine by reason",
                "Rows set aside, by reason (all sources).",
                svg=_svg(fig),
                table=_table(counts),
            )
        )
    else:
        s.panels.append(Panel("Quarantine by reason", "No row has been quarantined."))
    return s


def _validations(lake: LakeTables, w: Window, docs_rel: str) -> tuple[list[dict[str, Any]], str]:
    from outoforder.io.tables import QUALITY_RUNS

    runs = lake.get(QUALITY_RUNS)
    if w.run_name is not None and not runs.empty:
        runs = runs[runs["run_name"] == safe_run_name(w.run_name)]
    if runs.empty:
        return [], ""
    latest = runs.sort_values("validated_at_us").groupby(["checkpoint", "suite", "source", "job"]).tail(1)
    # a failure a feasibility suite of the same run explains is a warning: out of reach under the bound
    failed = runs[~runs["success"].astype(bool)].groupby(["run_name", "source", "job"])["suite"].agg(list)
    warned = {key: out_of_reach(suites) for key, suites in failed.items()}
    rows = []
    for r in latest.sort_values(["checkpoint", "source", "job", "suite"]).to_dict("records"):
        out = r["suite"] in warned.get((r["run_name"], r["source"], r["job"]), set())
        link = f"{docs_rel}/{r['docs_page']}" if r["docs_page"] else ""
        rows.append(
            {
                "checkpoint": r["checkpoint"],
                "suite": r["suite"],
                "meaning": SUITES[r["suite"]].meaning if r["suite"] in SUITES else "",
                "source": r["source"],
                "job": r["job"],
                "verdict": "PASSED" if r["success"] else "OUT OF REACH" if out else "FAILED",
                "checks": f"{r['checks_passed']}/{r['checks_total']}",
                "when": _clock(int(r["validated_at_us"])),
                "run": r["run_name"],
                "link": link,
                "failed": list(r["failed_checks"]),
            }
        )
    history = runs.groupby(["checkpoint", "suite"]).agg(
        runs=("run_name", "nunique"), failed=("success", lambda v: int((~v.astype(bool)).sum()))
    )
    return rows, _table(history.reset_index())


def _headline(lake: LakeTables, w: Window) -> list[dict[str, Any]]:
    from outoforder.io.tables import QUALITY_MEASURES

    measures = w.keep(lake.get(QUALITY_MEASURES), "end_us")
    rows = []
    names = {"join_recall": ("stream join", "recall ≥ {t:g} per period", True),
             "agg_error": ("aggregates", "error < {t:g} in ≥ (1 − δ) of windows", False),
             "topk_hit_rate": ("top-k", "mean accuracy ≥ {t:g}", True)}  # fmt: skip
    for (measure, source, job), part in measures.groupby(["measure", "source", "job"], sort=True):
        what, goal, _ = names.get(str(measure), (str(measure), "{t:g}", True))
        t = float(part["target"].iloc[-1])
        values = part["value"].dropna().astype("float64")
        achieved = (
            f"mean {values.mean():.4f}, {part['met'].mean():.1%} of {len(part):,} met"
            if measure != "agg_error"
            else f"{part['met'].mean():.1%} of {len(part):,} windows within ε"
        )
        rows.append(
            {"operator": what, "source": source, "job": job, "target": goal.format(t=t), "achieved": achieved}
        )
    return rows


def _baselines(lake: LakeTables) -> list[dict[str, Any]]:
    """The join evaluation's candidates side by side: recall and memory against QJoin's."""
    from outoforder.io.tables import JOIN_METRICS

    metrics = lake.get(JOIN_METRICS)
    if metrics.empty:
        return []
    metrics = metrics[~metrics["method"].astype(str).str.startswith("stream:")]
    rows = []
    for source, part in metrics.groupby("source", sort=True):
        memory = (
            (part["buffered_mean_r"].fillna(0) + part["buffered_mean_s"].fillna(0))
            .groupby(part["method"])
            .mean()
        )
        recall = part.groupby("method")["recall"].mean()
        met = part.groupby("method")["met"].mean()
        ref = float(memory.get("qjoin-learned", float("nan")))
        for method in recall.index:
            rows.append(
                {
                    "source": str(source),
                    "method": str(method),
                    "recall": f"{recall[method]:.4f}",
                    "periods_met": f"{met[method]:.0%}",
                    "buffered": f"{memory[method]:,.0f}",
                    "memory_vs_qjoin": f"{memory[method] / ref:.2f}×" if ref > 0 else "n/a",
                }
            )
    return rows


def headline_text(lake: LakeTables) -> str:
    """The headline tables as plain text (what the main job prints at its end)."""
    lines = ["Targets and what was achieved (against exact recomputation):"]
    head = _headline(lake, Window())
    if not head:
        lines.append("  nothing judged yet")
    for r in head:
        lines.append(f"  {r['operator']:<12} {r['source']:<32} {r['target']:<40} {r['achieved']}")
    base = _baselines(lake)
    if base:
        lines.append(
            "Stream join against its baselines (same replay, same Q_user; memory = mean buffered tuples):"
        )
        lines.append(
            f"  {'method':<18} {'recall':>7} {'periods met':>12} {'buffered':>10} {'memory vs QJoin':>16}"
        )
        for r in base:
            lines.append(
                f"  {r['method']:<18} {r['recall']:>7} {r['periods_met']:>12} {r['buffered']:>10} "
                f"{r['memory_vs_qjoin']:>16}"
            )
    return "\n".join(lines)


SECTIONS: dict[str, Callable[[LakeTables, Window], Section | None]] = {
    "join": lambda lake, w: _join_section(lake, w),
    "aggregate": lambda lake, w: _aggregate_section(lake, w),
    "topk": lambda lake, w: _topk_section(lake, w),
    "theta": lambda lake, w: _theta_section(lake, w),
    "inputs": lambda lake, w: _inputs_section(lake, w),
}


def render(
    lake: LakeTables, out: Path, window: Window, title: str, sections: Sequence[str] | None = None
) -> Path:
    """Write one report page to ``out`` (with the named :data:`SECTIONS` only, given ``sections``)."""
    import jinja2

    settings = lake.settings
    out.parent.mkdir(parents=True, exist_ok=True)
    docs_rel = Path(os.path.relpath(settings.quality.docs_dir, out.parent)).as_posix()
    unknown = sorted(set(sections or ()) - set(SECTIONS))
    if unknown:
        msg = f"unknown report sections {unknown}; known: {', '.join(SECTIONS)}"
        raise ConfigError(msg)
    chosen = [SECTIONS[name](lake, window) for name in (sections or SECTIONS)]
    sections_ = [s for s in chosen if s is not None]
    validations, history = _validations(lake, window, docs_rel)
    scope = "everything processed so far"
    if window.start_us is not None or window.end_us is not None:
        lo = _clock(window.start_us) if window.start_us is not None else "the beginning"
        hi = _clock(window.end_us) if window.end_us is not None else "now"
        scope = f"arrival times from {lo} to {hi}"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)),
        autoescape=jinja2.select_autoescape(["j2", "html"]),
    )
    page = env.get_template(TEMPLATE.name).render(
        title=title,
        scope=scope,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        lake=str(settings.lake_root),
        headline=_headline(lake, window),
        baselines=_baselines(lake) if window.run_name is None else [],
        sections=sections_,
        validations=validations,
        history=history,
        docs_index=f"{docs_rel}/index.html" if settings.quality.build_docs else "",
        cumulative="../index.html" if window.run_name else "",
    )
    out.write_text(page, encoding="utf-8")
    return out


def report_paths(settings: Settings, run_name: str | None = None) -> tuple[Path, Path | None]:
    """Where the cumulative page and a run's page are written."""
    root = settings.quality.reports_dir / "quality"
    return root / "index.html", (root / "runs" / f"{safe_run_name(run_name)}.html" if run_name else None)


def pages_due(settings: Settings, run_name: str | None = None) -> tuple[bool, bool]:
    """Which pages a report run writes now: (the cumulative page, the run's own page).

    The cumulative page unless another report rebuilt it less than ``quality.cumulative_every_s``
    ago (on a live stream the stream DAGs all finish within the same minute, and one of them
    rebuilding it is enough); the run's page given a run name, unless ``quality.run_pages`` is off.
    """
    cumulative, _ = report_paths(settings)
    every_s = settings.quality.cumulative_every_s
    age = time.time() - cumulative.stat().st_mtime if cumulative.exists() else None
    if age is not None and age < every_s:
        log.info("[report] the cumulative page is %.0f s old (< %g s): kept as it is", age, every_s)
    run_page = run_name is not None and settings.quality.run_pages
    if run_name is not None and not run_page:
        log.info("[report] no page for run %s (quality.run_pages is off)", run_name)
    return age is None or age >= every_s, run_page


def build_reports(
    spark: SparkSession,
    settings: Settings,
    run_name: str | None = None,
    start_us: int | None = None,
    end_us: int | None = None,
    tables: LakeTables | None = None,
    sections: Sequence[str] | None = None,
    due: tuple[bool, bool] | None = None,
) -> list[Path]:
    """Write the cumulative report and, given a run name, the run's own page; return their paths.

    ``tables`` shares the tables read with a caller that also wants :func:`headline_text`.
    ``sections`` limits the run's page to its operators' sections. Only the pages
    :func:`pages_due` names (or ``due``, what it said to the caller) are written.
    """
    lake = tables if tables is not None else LakeTables(spark, settings)
    cumulative, per_run = report_paths(settings, run_name)
    written = []
    cumulative_due, run_due = due if due is not None else pages_due(settings, run_name)
    if cumulative_due:
        written.append(render(lake, cumulative, Window(), "Data quality: cumulative"))
    if per_run is not None and run_due:
        written.append(
            render(
                lake, per_run, Window(start_us, end_us, run_name), f"Data quality: run {run_name}", sections
            )
        )
    return written
