"""The report's building blocks: panels, sections, the window of arrival time, the tables read once."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from outoforder.io.deltars import Filter


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

    def filters(self, col: str) -> list[Filter]:
        """The interval as row filters on ``col`` (to read only its rows)."""
        out: list[Filter] = []
        if self.start_us is not None:
            out.append((col, ">=", self.start_us))
        if self.end_us is not None:
            out.append((col, "<", self.end_us))
        return out

    def keep(self, frame: pd.DataFrame, col: str) -> pd.DataFrame:
        """The rows of ``frame`` whose ``col`` lies in the interval."""
        if self.start_us is not None:
            frame = frame[frame[col] >= self.start_us]
        if self.end_us is not None:
            frame = frame[frame[col] < self.end_us]
        return frame


def svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog: the SVG sits inside the HTML


def figure(ylabel: str, xlabel: str = "seconds") -> tuple[Any, Any]:
    """A new figure and axes, labelled, in the report's size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 2.8))
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    return fig, ax


def seconds(values: Any, origin: int) -> Any:
    """Microsecond times as seconds from ``origin``."""
    return (values.astype("float64") - origin) / 1e6


def html_table(frame: pd.DataFrame, max_rows: int = 200) -> str:
    """A frame as an HTML table of at most ``max_rows`` rows (saying how many more there are)."""
    shown = frame.head(max_rows)
    more = (
        f"<p class='note'>{len(frame) - max_rows:,} more rows not shown.</p>" if len(frame) > max_rows else ""
    )
    return (
        shown.to_html(index=False, border=0, classes="data", escape=True, float_format=lambda v: f"{v:,.4g}")
        + more
    )


def clock(us: int) -> str:
    """A microsecond timestamp as a UTC date and time to the millisecond."""
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


class LakeTables:
    """Reads tables once each, as pandas frames (empty when a table does not exist yet).

    Read on the driver (:mod:`outoforder.io.deltars`): only the columns asked for, and with
    ``where`` only the files whose statistics can hold matching rows, so a run's page reads its
    interval's rows, not the history, and no Spark job runs. One instance serves every page and
    the headline of one report run.
    """

    def __init__(self, spark: SparkSession | None, settings: Settings) -> None:
        self.spark, self.settings = spark, settings
        self._cache: dict[tuple[Any, ...], pd.DataFrame] = {}

    def get(self, table: Any, columns: list[str] | None = None, where: Sequence[Filter] = ()) -> pd.DataFrame:
        """The table's rows matching ``where`` (only ``columns`` when given), read the first time asked."""
        import pandas as pd

        from outoforder.io import deltars

        cols = columns or table.schema.fieldNames()
        key = (table.name, tuple(cols), tuple(where))
        if key not in self._cache:
            got = deltars.read_table(table, self.settings.lake_root, self.settings.storage, where, cols)
            self._cache[key] = pd.DataFrame(columns=cols) if got is None else got.to_pandas()
        return self._cache[key]

    def counts(self, table: Any, by: list[str], where: Sequence[Filter] = ()) -> pd.DataFrame:
        """Rows of ``table`` matching ``where`` per value of ``by`` (column ``rows``): only ``by`` is read."""
        frame = self.get(table, by, where)
        return frame.groupby(by, dropna=False).size().rename("rows").reset_index()


def jobs(frame: pd.DataFrame) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """(source, job, its rows) of a frame with ``source`` and ``job`` columns, sorted."""
    for (source, job), part in frame.groupby(["source", "job"], sort=True):
        yield str(source), str(job), part


def measure_panel(
    part: pd.DataFrame, what: str, ylabel: str, higher_is_better: bool, log: bool = False
) -> Panel:
    """A measure over time per job, with the target line."""
    part = part.sort_values("end_us")
    origin = int(part["start_us"].min())
    fig, ax = figure(ylabel, "event time of the end (seconds from the first)")
    x = seconds(part["end_us"], origin)
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
    return Panel(f"{ylabel} against the target", explain, svg=svg(fig))


def steps_panel(
    frame: pd.DataFrame, x: str, series: Mapping[str, Callable[..., Any]], ylabel: str, title: str,
    explain: str, origin: int | None = None, step: bool = True,
) -> Panel:  # fmt: skip
    """A parameter's steps over time (one series per column function), with an explanation."""
    frame = frame.sort_values(x)
    origin = int(frame[x].min()) if origin is None else origin
    fig, ax = figure(ylabel, "arrival time (seconds from the first shown)")
    xs = seconds(frame[x], origin)
    for (label, fn), colour in zip(series.items(), COLOURS, strict=False):
        if step:
            ax.step(xs, fn(frame), where="post", label=label, color=colour)
        else:
            ax.plot(xs, fn(frame), label=label, color=colour, marker=".", ms=3, lw=1)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return Panel(title, explain, svg=svg(fig))
