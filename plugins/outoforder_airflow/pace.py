"""Whether the stream DAGs keep pace with the stream: per DAG, each run's lag, the trend, the states.

A stream DAG's scheduled run covers the arrival interval that ends at its logical date. Its
**lag** is when its stream stage ended successfully minus that end: how far the results are
behind the stream. Over a DAG's newest runs (:data:`RUNS`), the pipeline **keeps pace** when every
DAG's mean lag is within its interval and not growing: the mean lag of the newest third of the
runs over the oldest third's (the **trend**) is at most :data:`TREND_LIMIT`. **Fresh** is how old
the newest arrival its results cover is now (from the stage's asset event, ``end_us``).

Read from Airflow's metadata database (the web app's ``/outoforder/live`` page, which refreshes
itself, and ``bash infra/live.sh status``, which prints the same figures:
``python -m outoforder_airflow.pace``).
"""

from __future__ import annotations

import html
import statistics
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from outoforder_airflow.operators import STREAM_INTERVAL

RUNS = 30  # a DAG's newest scheduled runs that are judged
TREND_LIMIT = 1.2
REFRESH_S = 30  # the live page reloads itself this often
LAG_BOUND_S = STREAM_INTERVAL.total_seconds()  # a mean lag beyond a run's interval falls behind


def stage_tasks() -> dict[str, tuple[str, str | None]]:
    """Per stream DAG: its stream stage's task, and the results table whose events say how fresh it is.

    The Kafka ingest, then every operator's stream DAG (``<operator>_stream``, its task
    ``<operator>_interval``), from the registry.
    """
    from outoforder.stages import registry

    out: dict[str, tuple[str, str | None]] = {"ingest_kafka": ("ingest", "bronze/arrivals")}
    for op in registry.operators():
        if op.stream is not None:
            writes = op.stage(op.stream).writes
            out[f"{op.name}_stream"] = (f"{op.name}_interval", writes[0] if writes else None)
    return out


@dataclass(frozen=True)
class Run:
    """One scheduled run: its interval's end, its state, and when its stream stage succeeded."""

    dag: str
    interval_end: datetime
    state: str
    stage_end: datetime | None  # None: the stage has not succeeded (yet)

    @property
    def lag_s(self) -> float | None:
        """The stage's end minus the interval's end (None before it succeeded)."""
        if self.stage_end is None:
            return None
        return round((self.stage_end - self.interval_end).total_seconds(), 1)


@dataclass(frozen=True)
class Pace:
    """A DAG's pace over its newest runs."""

    dag: str
    runs: int
    states: dict[str, int]
    lags: list[float] = field(default_factory=list)  # oldest first
    fresh_s: float | None = None  # the age of the newest arrival its results cover, now

    @property
    def mean_lag_s(self) -> float | None:
        """The mean lag of the runs whose stage succeeded."""
        return round(statistics.fmean(self.lags), 1) if self.lags else None

    @property
    def trend(self) -> float | None:
        """Mean lag of the newest third of the runs over the oldest third's (None below 6 runs)."""
        if len(self.lags) < 6:
            return None
        third = len(self.lags) // 3
        first, last = statistics.fmean(self.lags[:third]), statistics.fmean(self.lags[-third:])
        return round(last / first, 2) if first > 0 else None

    @property
    def keeps_pace(self) -> bool | None:
        """Mean lag within the interval and a trend within the limit (None: too few runs to say)."""
        if self.mean_lag_s is None:
            return None
        trend = self.trend
        return self.mean_lag_s <= LAG_BOUND_S and (trend is None or trend <= TREND_LIMIT)


def summarize(runs: Iterable[Run], fresh: dict[str, float] | None = None) -> list[Pace]:
    """Each DAG's :class:`Pace` over its newest :data:`RUNS` runs (``runs`` in any order).

    >>> from datetime import timedelta
    >>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
    >>> runs = [Run("join_stream", t0 + timedelta(minutes=i), "success",
    ...             t0 + timedelta(minutes=i, seconds=20 + i)) for i in range(9)]
    >>> (p,) = summarize(runs)
    >>> p.mean_lag_s, p.trend, p.keeps_pace, p.states
    (24.0, 1.29, False, {'success': 9})
    """
    by_dag: dict[str, list[Run]] = {}
    for r in sorted(runs, key=lambda r: r.interval_end):
        by_dag.setdefault(r.dag, []).append(r)
    out = []
    for dag, rs in by_dag.items():
        newest = rs[-RUNS:]
        lags = [lag for r in newest if (lag := r.lag_s) is not None]
        states = dict(Counter(r.state for r in newest))
        out.append(Pace(dag, len(newest), states, lags, (fresh or {}).get(dag)))
    return out


def verdict(paces: Sequence[Pace]) -> str:
    """The one line: does the pipeline keep pace, and if not, which DAGs fall behind."""
    if not paces:
        return "no scheduled stream run yet"
    behind = [p.dag for p in paces if p.keeps_pace is False]
    unknown = [p.dag for p in paces if p.keeps_pace is None]
    if behind:
        return f"falls behind: {', '.join(behind)} (mean lag over {LAG_BOUND_S:g} s or growing)"
    if unknown:
        return f"keeps pace so far; not yet judged: {', '.join(unknown)}"
    return f"keeps pace: every DAG's mean lag within {LAG_BOUND_S:g} s and not growing"


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def _rows(paces: Sequence[Pace]) -> list[list[str]]:
    return [
        [p.dag, str(p.runs), ", ".join(f"{k} {v}" for k, v in sorted(p.states.items())),
         _fmt(p.lags[-1] if p.lags else None), _fmt(p.mean_lag_s), _fmt(max(p.lags) if p.lags else None),
         _fmt(p.trend, ".2f"), _fmt(p.fresh_s)]
        for p in paces
    ]  # fmt: skip


HEADER = ["DAG", "runs", "states", "last lag (s)", "mean lag (s)", "max lag (s)", "trend", "fresh (s)"]


def text(paces: Sequence[Pace]) -> str:
    """The figures as a plain table and the verdict line."""
    rows = [HEADER, *_rows(paces)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([*lines, verdict(paces)])


def page(paces: Sequence[Pace], now: datetime) -> str:
    """The live page: the table, the verdict, and a reload every :data:`REFRESH_S` seconds."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in _rows(paces)
    )
    ok = all(p.keeps_pace for p in paces) and bool(paces)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{REFRESH_S}'><title>outoforder: live pace</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:4px 10px;border-bottom:1px solid #ddd;"
        "text-align:right}td:first-child,th:first-child{text-align:left}.ok{color:#1a7f37}.no{color:#b42318}"
        "</style></head><body><h1>Live pace</h1>"
        f"<p id='verdict' class='{'ok' if ok else 'no'}'><b>{html.escape(verdict(paces))}</b></p>"
        f"<table id='pace'><tr>{head}</tr>{body}</table>"
        f"<p>Lag: a run's stream stage ended minus its interval's end; trend: the newest third of the "
        f"last {RUNS} runs' mean lag over the oldest third's (≤ {TREND_LIMIT}); fresh: the age of the "
        f"newest arrival the results cover. As of {now:%Y-%m-%d %H:%M:%S} UTC; reloads every "
        f"{REFRESH_S} s. <a href='reports/quality/index.html'>Quality report</a></p></body></html>"
    )


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def from_airflow(now: datetime | None = None) -> list[Pace]:
    """The stream DAGs' pace, read from Airflow's metadata database (API server or CLI process)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    now = now or datetime.now(UTC)
    tasks = stage_tasks()
    runs: list[Run] = []
    fresh: dict[str, float] = {}
    with create_session() as session:
        for dag_id, (task_id, table) in tasks.items():
            newest = session.execute(
                select(DagRun.run_id, DagRun.state, DagRun.logical_date)
                .where(DagRun.dag_id == dag_id, DagRun.run_type == "scheduled")
                .order_by(DagRun.logical_date.desc())
                .limit(RUNS)
            ).all()
            if not newest:
                continue
            ends = dict(
                session.execute(
                    select(TaskInstance.run_id, TaskInstance.end_date).where(
                        TaskInstance.dag_id == dag_id,
                        TaskInstance.task_id == task_id,
                        TaskInstance.state == "success",
                        TaskInstance.run_id.in_([r.run_id for r in newest]),
                    )
                ).all()
            )
            for r in newest:
                end = _utc(r.logical_date)
                if end is not None:
                    runs.append(Run(dag_id, end, str(r.state), _utc(ends.get(r.run_id))))
            covered = _newest_covered(session, table) if table else None
            if covered is not None:
                fresh[dag_id] = round((now - covered).total_seconds(), 1)
    return summarize(runs, fresh)


def _newest_covered(session: Any, table: str) -> datetime | None:
    """The newest arrival a stage's event on ``table`` says its run covered (``end_us``), if any."""
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    got = session.execute(
        select(AssetEvent.extra)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .where(AssetModel.name == table)
        .order_by(AssetEvent.timestamp.desc())
        .limit(5)
    ).all()
    for (extra,) in got:
        end_us = (extra or {}).get("end_us")
        if end_us:
            return datetime.fromtimestamp(int(end_us) / 1e6, UTC)
    return None


def main() -> int:
    """Print the pace table and the verdict (``bash infra/live.sh status``).

    While a session starts, Airflow's database may not have its tables yet: said, with exit 3.
    """
    from sqlalchemy.exc import OperationalError

    try:
        paces = from_airflow()
    except OperationalError as e:
        sys.stderr.write(
            f"[live] Airflow's database cannot be read yet ({str(e.orig).strip()}): the session is "
            "probably still starting; try again in a minute\n"
        )
        return 3
    sys.stdout.write(text(paces) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
