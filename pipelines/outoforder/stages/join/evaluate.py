"""Join evaluation: QJoin and the K-slack baselines over one arrival sequence, against the truth.

The input is a bronze source (``--source``) or a file of your own (``--file``, CSV or Parquet with
columns ``stream`` or ``side``, ``event_ts`` or ``ts`` in µs, and ``x``, ``y`` for a distance join
or ``key`` for a key join; the row order is the arrival order). Two stream sets form R and S.
Every candidate runs on the same arrivals with the same query; each is measured against the exact
join, per period P:

- ``qjoin-learned`` / ``qjoin-paper``: QJoin adapted every L with either of the seed's estimators;
- ``qjoin-reactive``: the learned estimator on the current delay regime only, for abrupt changes
  (:func:`~outoforder.core.joins.requirements.regime_start`);
- ``qjoin-robust``: the reactive estimator, and no interval aims below Q_user plus the job's
  headroom (a period ahead of its target is no promise about the next interval);
- ``qjoin-hindsight``: the smallest constant retention that meets Q_user in every period, found
  with hindsight (the yardstick for the adaptive choices);
- ``kslack-hindsight``: the smallest fixed K that meets Q_user in every period, with hindsight;
- ``mp-kslack``: K = the largest delay seen; ``aq-kslack``: K from the last L's delays.

The summary (JSON) has one record per method with recall, periods meeting the target, buffered
tuples, logical latency, throughput of the set form (tuples/s, this machine) and ratios to
MP-K-slack; the per-period figures go to the Delta table ``gold/join_metrics`` when run on bronze.
This evaluates whole sequences; the per-interval stream stage is :mod:`outoforder.stages.join.stream`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from outoforder.core.joins.adaptive import run_adaptive_qjoin
from outoforder.core.joins.aq_kslack import run_aq_kslack
from outoforder.core.joins.feasibility import least_constant, requirements
from outoforder.core.joins.kslack import FixedK, MaxDelayK, kslack_set, slack_requirements
from outoforder.core.joins.metrics import period_of, summarize
from outoforder.core.joins.qjoin import JoinRun, qjoin_set
from outoforder.core.joins.query import IntArray, JoinInput, JoinQuery, PairArray, exact_join
from outoforder.errors import ConfigError, InputError
from outoforder.stages.join.inputs import input_from_frame
from outoforder.stages.join.spec import ESTIMATORS, METHODS, JoinJob

if TYPE_CHECKING:
    from outoforder.stages.context import StageContext

log = logging.getLogger(__name__)

ADAPTIVE = tuple(f"qjoin-{e}" for e in ("robust", "reactive", "learned", "paper"))  # by cost
COST_COLUMNS = (
    "buffered_mean_r",
    "buffered_mean_s",
    "buffered_max_r",
    "buffered_max_s",
    "latency_mean_us",
    "latency_p95_us",
)


def on_grid(least_us: int, upper_us: int, grid_us: int) -> int:
    """The smallest multiple of ``grid_us`` at or above ``least_us``, at most one step past ``upper_us``.

    >>> on_grid(0, 100, 10), on_grid(31, 100, 10), on_grid(500, 100, 10)
    (0, 40, 110)
    """
    return min(-(-least_us // grid_us), upper_us // grid_us + 1) * grid_us


def evaluate(
    inp: JoinInput,
    job: JoinJob,
    methods: tuple[str, ...] = METHODS,
    truth: PairArray | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run the methods side by side and summarise each against the exact join (``truth``, if known).

    ``workers`` methods run at once (default: one per core), in threads: the work is numpy's, which
    releases the interpreter lock. A method's seconds are its own wall time, so compare them across
    methods with ``workers=1``.
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        msg = f"unknown methods {sorted(unknown)}; known: {', '.join(METHODS)}"
        raise ConfigError(msg)
    q = job.query()
    t0 = time.monotonic()
    truth = exact_join(inp, q) if truth is None else truth
    truth_s = time.monotonic() - t0
    span = int(inp.ts.max() - inp.ts.min()) if len(inp) else 0

    def score(run: JoinRun) -> dict[str, Any]:
        return summarize(inp, truth, run, job.period_us, job.q_user, job.warmup_periods)

    period = period_of(inp, truth, int(inp.ts.min()) if len(inp) else 0, job.period_us)

    def hindsight(req: IntArray) -> int:
        # the least constant on the grid meeting Q_user in every judged period (a run under a
        # constant keeps exactly the pairs whose requirement it covers)
        least = least_constant(req, period, job.q_user, job.warmup_periods)
        return on_grid(least, span, job.granularity_us)

    def retention() -> tuple[JoinRun, dict[str, Any]]:
        d = hindsight(requirements(inp, q, truth)[0])
        return qjoin_set(inp, q, d, d, truth), {"retention_us": d}

    def slack() -> tuple[JoinRun, dict[str, Any]]:
        k = hindsight(slack_requirements(inp, truth))
        return kslack_set(inp, q, FixedK(k, k), truth), {"k_us": k}

    runners: dict[str, Callable[[], tuple[JoinRun, dict[str, Any]]]] = {
        **{f"qjoin-{e}": partial(_adaptive, inp, q, job, e, truth) for e in ESTIMATORS},
        "qjoin-hindsight": retention,
        "kslack-hindsight": slack,
        "mp-kslack": lambda: (kslack_set(inp, q, MaxDelayK(), truth), {}),
        "aq-kslack": lambda: (run_aq_kslack(inp, q, job.adaptation(), truth)[0], {}),
    }

    def measure(m: str) -> dict[str, Any]:
        t = time.monotonic()
        run, params = runners[m]()
        seconds = time.monotonic() - t
        rec = score(run)
        rec.update(
            method=m,
            seconds=round(seconds, 3),
            throughput_tps=round(len(inp) / seconds, 1) if seconds > 0 else None,
            params=params,
        )
        log.info(
            "[join] %s: recall %.4f, %.0f%% of periods meet %s, buffered %.0f, %.1f s",
            m, rec["recall_mean"], 100 * rec["periods_meeting_target"], job.q_user, rec["buffered_mean"],
            seconds,
        )  # fmt: skip
        return rec

    # the adaptive runs cost the most (a decision every L): started first, none is left alone at the end
    heavy_first = [m for m in ADAPTIVE if m in methods] + [m for m in methods if m not in ADAPTIVE]
    with ThreadPoolExecutor(max(1, min(workers or os.cpu_count() or 1, len(methods)))) as pool:
        done = dict(zip(heavy_first, pool.map(measure, heavy_first), strict=True))
    records = {m: done[m] for m in methods}
    base = records.get("mp-kslack")
    for rec in records.values():
        if base:
            rec["buffered_vs_mp_kslack"] = _ratio(rec["buffered_mean"], base["buffered_mean"])
            rec["latency_vs_mp_kslack"] = _ratio(rec["latency_mean_us"], base["latency_mean_us"])
        if "qjoin-hindsight" in records:
            rec["buffered_vs_hindsight_qjoin"] = _ratio(
                rec["buffered_mean"], records["qjoin-hindsight"]["buffered_mean"]
            )
    return {
        "job": asdict(job),
        "tuples": len(inp),
        "true_pairs": int(truth.shape[0]),
        "truth_seconds": round(truth_s, 3),
        "methods": records,
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _adaptive(
    inp: JoinInput, q: JoinQuery, job: JoinJob, estimator: str, truth: PairArray
) -> tuple[JoinRun, dict[str, Any]]:
    run, steps = run_adaptive_qjoin(inp, q, job.adaptation(estimator), truth)
    trace = [
        {
            "at_index": s.at_index,
            "progress_us": s.progress_us,
            "q_l": round(s.q_l, 4),
            "d_r_us": s.d_r_us,
            "d_s_us": s.d_s_us,
        }
        for s in steps
    ]
    return run, {"adaptations": len(steps), "trace": trace}


def format_summary(result: dict[str, Any]) -> str:
    """A table of the methods' headline figures."""
    head = (
        f"{'method':<18} {'recall':>7} {'periods ok':>10} {'buffered':>9} {'max buf':>8} "
        f"{'latency ms':>10} {'p95 ms':>8} {'vs MP buf':>9}"
    )
    lines = [
        f"[join] {result['tuples']:,} tuples, {result['true_pairs']:,} true pairs",
        head,
        "-" * len(head),
    ]
    for m, r in result["methods"].items():
        vs = r.get("buffered_vs_mp_kslack")
        lines.append(
            f"{m:<18} {r['recall_mean']:>7.4f} {100 * r['periods_meeting_target']:>9.0f}% "
            f"{r['buffered_mean']:>9.0f} "
            f"{r['buffered_max']:>8} {r['latency_mean_us'] / 1000:>10.1f} {r['latency_p95_us'] / 1000:>8.1f} "
            f"{'' if vs is None else f'{vs:.3f}':>9}"
        )
    return "\n".join(lines)


def read_user_file(path: Path) -> pd.DataFrame:
    """A CSV or Parquet file of arrivals, in arrival order."""
    if not path.is_file():
        msg = f"no such file: {path}"
        raise InputError(msg)
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError) as e:
        msg = f"cannot read {path} as {'Parquet' if path.suffix == '.parquet' else 'CSV'}: {e}"
        raise InputError(msg) from e


def evaluate_file(path: Path, job: JoinJob, methods: tuple[str, ...] = METHODS) -> dict[str, Any]:
    """Evaluate the join candidates on a user's file of arrivals (see :func:`input_from_frame`)."""
    result = evaluate(input_from_frame(read_user_file(path), job, path.name, both_sides=True), job, methods)
    result["file"] = str(path)
    return result


def write_summary(result: dict[str, Any], path: Path) -> Path:
    """The JSON quality summary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))
    return path


def run_join_on_source(ctx: StageContext, methods: tuple[str, ...] = METHODS) -> dict[str, Any]:
    """Evaluate the join candidates on one bronze source; store per-period metrics; return the summary."""
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(JoinJob)
    from outoforder.io import delta  # Spark only when reading bronze: file evaluations need none
    from outoforder.io.tables import BRONZE, JOIN_METRICS

    pdf = (
        delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source)
        .select("arrival_seq", "stream", "event_ts", "x", "y", "key")
        .orderBy("arrival_seq")
        .toPandas()
    )
    if pdf.empty:
        msg = f"bronze has no rows for source {source!r}"
        raise InputError(msg)
    result = evaluate(input_from_frame(pdf, job, f"source {source}", both_sides=True), job, methods)
    result["source"] = source
    rows = [
        (
            source,
            m,
            p["period"],
            p["start_us"],
            p["true_pairs"],
            p["produced_pairs"],
            float(p["recall"]),
            bool(p["met"]),
            float(job.q_user),
            *(p.get(c) for c in COST_COLUMNS),
        )
        for m, r in result["methods"].items()
        for p in r["per_period"]
    ]
    delta.replace_source(
        spark.createDataFrame(rows, JOIN_METRICS.schema), JOIN_METRICS, settings.lake_root, source
    )
    return result
