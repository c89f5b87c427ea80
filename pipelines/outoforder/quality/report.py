"""The data-quality report: one self-contained HTML page (inline SVG plots), cumulative and per run.

It reads only tables the stages and validations already wrote (``gold/quality_measures``,
``gold/quality_runs``, the operators' parameter traces, buffers, repairs and the quarantine) and
explains each figure in plain words, for readers who have not read the papers behind the operators.

A per-run page keeps the rows of one arrival-time interval ``[start, end)``: parameter traces and
buffers by the arrival time they were recorded at, judged periods and windows by their end (the
replays share one clock for event and arrival time), validations by run name.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import REPO_ROOT, Settings
from outoforder.errors import ConfigError
from outoforder.quality.checkpoints import safe_run_name
from outoforder.quality.panels import LakeTables, Window, clock, html_table
from outoforder.quality.sections import SECTIONS
from outoforder.quality.suites import SUITES, out_of_reach

log = logging.getLogger(__name__)
if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TEMPLATE = REPO_ROOT / "include" / "templates" / "quality_report.html.j2"


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
                "when": clock(int(r["validated_at_us"])),
                "run": r["run_name"],
                "link": link,
                "failed": list(r["failed_checks"]),
            }
        )
    history = runs.groupby(["checkpoint", "suite"]).agg(
        runs=("run_name", "nunique"), failed=("success", lambda v: int((~v.astype(bool)).sum()))
    )
    return rows, html_table(history.reset_index())


def _headline(lake: LakeTables, w: Window) -> list[dict[str, Any]]:
    from outoforder.io.tables import QUALITY_MEASURES

    measures = w.keep(lake.get(QUALITY_MEASURES, where=w.filters("end_us")), "end_us")
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
        lo = clock(window.start_us) if window.start_us is not None else "the beginning"
        hi = clock(window.end_us) if window.end_us is not None else "now"
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
