"""The estimators' constants, chosen on the families benchmark's tuning part alone.

``python -m benchmarks tuning`` (or ``bash infra/bench.sh tuning``) writes
``docs/benchmarks/tuning.{json,md,png}``.

Each constant of the robust estimator (:class:`~outoforder.core.joins.adaptation.AdaptationSettings`:
the headroom, the memory, the confidence bound, the regime detector's minimum sample and factor)
is varied one at a time around the defaults the stages use; every variant runs on every case of
the *tuning* part of :mod:`benchmarks.families` at each target. The held-out part is never
run here: it is judged by ``bench families`` with the defaults this sweep supports. The
aggregates' coverage horizon (:data:`AGG_SWEEP`) and top-k's settlement horizon and windows of
evidence (:data:`TOPK_SWEEP`, around the top-k stage's defaults) are swept on the same cases.

A variant is scored as the families benchmark scores the promise, in raw periods: the cases
keeping it (periods met >= :data:`~benchmarks.families.TARGET_SHARE`, mean buffer within
:data:`~benchmarks.families.BUFFER_BOUND` of hindsight's), then the fewest missed periods, then the
best worst case, then the lowest mean buffer against hindsight (within :data:`BUFFER_TIE` a tie).
How many of the missed periods no controller reading the past could meet is reported beside, as
an explanation, not a pass. The report says whether each default is the best of its row.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import families, family_operators
from benchmarks.harness import DEFAULT_OUT, log, machine, markdown_table, write_json
from outoforder.core.joins.adaptation import AdaptationSettings
from outoforder.core.joins.adaptive import run_adaptive_qjoin
from outoforder.core.joins.feasibility import period_verdicts
from outoforder.core.joins.metrics import period_recall, summarize
from outoforder.core.joins.query import exact_join
from outoforder.sources.workloads import Workload, arrive
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.join.evaluate import evaluate
from outoforder.stages.topk.spec import TopKJob

# the aggregates: family_operators' coverage horizon (a tie keeps the shorter), and the lateness
# controller's memory and headroom, each led by the aggregate stage's default, which stands on a tie
_AGG_STAGE = AggJob()
AGG_SWEEP: dict[str, tuple[Any, ...]] = {
    "horizon_windows": (1, 2, 3, 4),
    "memory": (_AGG_STAGE.memory, 25, 100, 200),
    "headroom": (_AGG_STAGE.headroom, 0.0, 0.25, 0.75),
}
# top-k's lateness controller (family_operators.topk_record's keywords), each row led by the top-k
# stage's default, which stands on a tie
_TOPK_STAGE = TopKJob(streams=("a",))
TOPK_SWEEP: dict[str, tuple[int, ...]] = {
    "horizon_us": (_TOPK_STAGE.horizon_us, 60_000_000, 120_000_000, 600_000_000),
    "n": (_TOPK_STAGE.n, 60, 120),
}
SWEEP: dict[str, tuple[float, ...]] = {
    "headroom": (0.25, 0.5, 0.75),
    "memory_periods": (5, 10, 20, 30),
    "memory_margin": (0.0, 0.25, 0.5, 1.0),
    "confidence": (0.75, 0.9, 0.97),
    "min_regime_pairs": (100, 200, 400),
    "regime_factor": (1.1, 1.25, 1.5, 2.0, 3.0),
}


@dataclass(frozen=True)
class Case:
    """One tuning case: a workload under a family (its arrivals are drawn from the seed)."""

    workload: Workload
    family: str
    seed: int


def cases(quick: bool) -> list[Case]:
    """The tuning part's cases, with the seeds the families benchmark gives them."""
    tuning, _ = families.parts(quick)
    return [
        Case(w, f, families.case_seed(0, j, k))
        for j, w in enumerate(tuning.workloads)
        for k, f in enumerate(tuning.families)
    ]


def variants(base: AdaptationSettings) -> list[tuple[str, Any]]:
    """(constant, value) for every variant, the defaults first as ("default", None)."""
    out: list[tuple[str, Any]] = [("default", None)]
    for name, values in SWEEP.items():
        out += [(name, v) for v in values if v != getattr(base, name)]
    return out


def run_case(case: Case) -> list[dict[str, Any]]:
    """Every variant on one case, at each target."""
    t0 = time.monotonic()
    a = arrive(case.workload, case.family, case.seed)
    truth = exact_join(a.inp, case.workload.query)
    out = []
    for q_user in families.Q_USERS:
        job = families.job_of(case.workload, q_user)
        hind = evaluate(a.inp, job, ("qjoin-hindsight",), truth)["methods"]["qjoin-hindsight"][
            "buffered_mean"
        ]
        infeasible = {
            v.period
            for v in period_verdicts(a.inp, job.query(), truth, job.period_us, q_user)
            if not v.feasible
        }
        base = job.adaptation()
        for name, value in variants(base):
            st = base if value is None else replace(base, **{name: value})
            run, _ = run_adaptive_qjoin(a.inp, job.query(), st, truth)
            s = summarize(a.inp, truth, run, job.period_us, q_user, job.warmup_periods)
            judged = period_recall(a.inp, truth, run.pairs, job.period_us, q_user)[job.warmup_periods :]
            missed = [p.period for p in judged if not p.met]
            unexcused = sum(p not in infeasible for p in missed)
            ratio = s["buffered_mean"] / hind if hind else 1.0
            share = 1.0 - len(missed) / max(len(judged), 1)
            out.append(
                {
                    "workload": case.workload.name, "family": case.family, "q_user": q_user,
                    "constant": name, "value": value, "periods": len(judged),
                    "periods_met": round(share, 4), "missed": len(missed), "unexcused": unexcused,
                    "periods_met_or_excused": round(1.0 - unexcused / max(len(judged), 1), 4),
                    "buffer_vs_hindsight": round(ratio, 3),
                    "kept": share >= families.TARGET_SHARE and ratio <= families.BUFFER_BOUND,
                }
            )  # fmt: skip
    log("tuning", f"{case.workload.name} {case.family}: {time.monotonic() - t0:.1f} s")
    return out


def run_aggregate_case(case: Case) -> list[dict[str, Any]]:
    """The aggregates' constants on one case, one at a time: COUNT at the stage's cadence."""
    a = arrive(case.workload, case.family, case.seed)
    out = []
    for name, values in AGG_SWEEP.items():
        for value in values:
            rec = family_operators.aggregate_record(case.workload, a, **{name: value})
            out.append(
                {
                    "workload": case.workload.name, "family": case.family, "constant": name, "value": value,
                    "met": rec["met"], "missed": rec["missed"], "unexcused": rec["unexcused"],
                    "met_share": rec["met_share"], "met_or_excused": rec["met_or_excused"],
                    "k_mean_s": rec["k_mean_s"],
                }
            )  # fmt: skip
    return out


def run_topk_case(case: Case) -> list[dict[str, Any]]:
    """Top-k's constants on one case, one at a time: accuracy and waiting against hindsight.

    A case too short for a steady state (no window ends after the warm-up) is recorded unjudged.
    """
    a = arrive(case.workload, case.family, case.seed)
    seed = families.TUNING_FAMILIES.index(case.family)  # bench families' score seed
    out = []
    base = {name: values[0] for name, values in TOPK_SWEEP.items()}
    for name, values in TOPK_SWEEP.items():
        for value in values:
            rec = family_operators.topk_record(case.workload, a, seed, **(base | {name: value}))
            ratio = rec["wait_vs_hindsight"]
            out.append(
                {
                    "workload": case.workload.name, "family": case.family, "constant": name,
                    "value": value, "judged": rec["met_share"] is not None, "met": rec["met"],
                    "accuracy": rec["met_share"], "k_mean_s": rec["k_mean_s"],
                    "wait_vs_hindsight": ratio,
                    "kept": bool(rec["met"]) and ratio is not None and ratio <= families.BUFFER_BOUND,
                }
            )  # fmt: skip
    return out


def topk_scores(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per top-k variant over its judged cases: kept, below ε_min, worst accuracy, waiting."""
    rows = []
    for name, value, every in by_variant(records):
        mine = [r for r in every if r["judged"]]
        rows.append(
            {
                "constant": name, "value": value, "kept": sum(r["kept"] for r in mine),
                "cases": len(mine), "missed": sum(not r["met"] for r in mine),
                "worst_share": min(r["accuracy"] for r in mine),
                "buffer_mean": round(float(np.mean([r["wait_vs_hindsight"] for r in mine])), 3),
                "buffer_max": max(r["wait_vs_hindsight"] for r in mine),
            }
        )  # fmt: skip
    return rows


def by_variant(records: list[dict[str, Any]]) -> list[tuple[str, Any, list[dict[str, Any]]]]:
    """(constant, value, its records) per variant, in the order the records first name them."""
    keys = list(dict.fromkeys((r["constant"], r["value"]) for r in records))
    return [(n, v, [r for r in records if (r["constant"], r["value"]) == (n, v)]) for n, v in keys]


def aggregate_scores(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per aggregate variant: cases meeting (ε, δ), missed windows, worst share, mean K."""
    return [
        {
            "constant": name, "value": value, "kept": sum(r["met"] for r in mine), "cases": len(mine),
            "missed": sum(r["missed"] for r in mine), "unexcused": sum(r["unexcused"] for r in mine),
            "worst_share": min(r["met_share"] for r in mine),
            "k_mean_s": round(float(np.mean([r["k_mean_s"] for r in mine])), 3),
        }
        for name, value, mine in by_variant(records)
    ]  # fmt: skip


def aggregate_choice(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per aggregate constant, its best value by the ranking of :func:`beats` (K for buffer)."""
    return choice([r | {"buffer_mean": r["k_mean_s"]} for r in rows], AGG_SWEEP)


def choice(rows: list[dict[str, Any]], sweep: Mapping[str, tuple[Any, ...]]) -> dict[str, Any]:
    """Per constant of ``sweep`` with rows, its best value by :func:`beats`; a tie keeps the earlier."""
    out = {}
    for name in sweep:
        mine = [r for r in rows if r["constant"] == name]
        if not mine:
            continue
        best = mine[0]
        for r in mine[1:]:
            best = r if beats(r, best) else best
        out[name] = best["value"]
    return out


def scores(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per variant: cases kept, unexcused misses, worst share, mean buffer ÷ hindsight."""
    return [
        {
            "constant": name, "value": "default" if value is None else value,
            "kept": sum(r["kept"] for r in mine), "cases": len(mine),
            "missed": sum(r["missed"] for r in mine), "unexcused": sum(r["unexcused"] for r in mine),
            "worst_share": min(r["periods_met"] for r in mine),
            "periods_met_mean": round(float(np.mean([r["periods_met"] for r in mine])), 4),
            "buffer_mean": round(float(np.mean([r["buffer_vs_hindsight"] for r in mine])), 3),
            "buffer_max": max(r["buffer_vs_hindsight"] for r in mine),
        }
        for name, value, mine in by_variant(records)
    ]  # fmt: skip


BUFFER_TIE = 0.02  # buffers this close (relative) are a tie: the default stands


def beats(row: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether ``row`` ranks above ``other``.

    More cases kept, then fewer missed periods (for the aggregates: windows), then a better worst
    share, then less buffer by more than :data:`BUFFER_TIE` (for the aggregates: less K).
    """
    a = (row["kept"], -row["missed"], row["worst_share"])
    b = (other["kept"], -other["missed"], other["worst_share"])
    if a != b:
        return a > b
    return bool(row["buffer_mean"] < other["buffer_mean"] * (1.0 - BUFFER_TIE))


def defaults_hold(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """Per constant: whether no value of its row beats the defaults."""
    default = next(r for r in rows if r["constant"] == "default")
    return {name: not any(beats(r, default) for r in rows if r["constant"] == name) for name in SWEEP}


COLUMNS = (
    ("constant", "constant", ""), ("value", "value", ""), ("kept", "cases kept", "d"),
    ("missed", "missed periods", "d"), ("unexcused", "… not judged infeasible", "d"),
    ("worst_share", "worst periods met", ".1%"),
    ("periods_met_mean", "periods met (mean)", ".1%"), ("buffer_mean", "buffer ÷ hindsight (mean)", ".2f"),
    ("buffer_max", "… (max)", ".2f"),
)  # fmt: skip


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The sweep: one row per variant, and whether each default is the best of its row."""
    base = meta["defaults"]
    held = meta["defaults_hold"]
    lines = [
        "# The estimators' constants, chosen on the tuning part",
        "",
        f"Command: `{meta['command']}` ({meta['seconds']:.0f} s, {meta['machine']['date']}, commit "
        f"{meta['machine']['commit']}). Tuning part only ({', '.join(meta['workloads'])} × "
        f"{', '.join(meta['families'])}, Q_user {' and '.join(f'{q:.2f}' for q in families.Q_USERS)}: "
        f"{meta['cases']} cases); the held-out part is judged by `bash infra/bench.sh families`. Each "
        "constant varies alone around the defaults "
        f"({', '.join(f'{k} {v}' for k, v in base.items())}). Ranked by cases keeping the promise in raw "
        "periods (the target met in ≥ 95 % of them, buffer ≤ 1.5× hindsight's), then missed periods, "
        "then the worst case's share, then buffer (within "
        f"{BUFFER_TIE:.0%} a tie, where the default stands).",
        "",
        markdown_table(rows, COLUMNS),
        "",
        "Defaults no variant of their row beats: "
        + ", ".join(f"{k} {'yes' if ok else 'NO'}" for k, ok in held.items())
        + ".",
        "",
        "## The aggregates' coverage horizon, memory and headroom",
        "",
        "COUNT over windows of three intervals sliding by one, the lateness controller adapting once "
        "per interval (as `bench families` runs it), on the same tuning cases; each constant varies "
        "alone: the horizon (how long after its close a window's members are counted, in window "
        "lengths; a tie keeps the shorter), and the controller's memory (the recent windows K is read "
        "off) and headroom (K serves the share (1 − δ) + headroom·δ of them), each led by the "
        "aggregate stage's default. A case meets "
        "(ε, δ) when the windows meeting ε are at least 1 − δ (raw, as for the join). Ranked as above, "
        "with the mean K for buffer. " + chosen(meta["aggregate_choice"], meta["aggregate_defaults"]),
        "",
        markdown_table(meta["aggregate_variants"], AGG_COLUMNS),
        "",
        "## Top-k's settlement horizon and evidence",
        "",
        "The top-5 of 60 s windows sliding by 5 s, the lateness controller (as `bench families` runs "
        "it), on the same tuning cases; each constant varies alone around the top-k stage's defaults "
        "(each row's first value): the horizon (how long after its emission a window's late members "
        "are awaited before its lateness profile joins the evidence) and n (how many settled windows "
        "the evidence keeps). A case is kept when the mean accuracy after the warm-up meets ε_min and "
        "the mean cache duration is within 1.5× hindsight's (floored at its 0.1 s step); cases too "
        "short for a steady state are not judged. Ranked as above (cases below ε_min for missed, the "
        "worst accuracy, the waiting over hindsight's for buffer). "
        + chosen(meta["topk_choice"], meta["topk_defaults"]),
        "",
        markdown_table(meta["topk_variants"], TOPK_COLUMNS),
        "",
    ]
    return "\n".join(lines)


def chosen(choice: dict[str, Any], used: dict[str, Any]) -> str:
    """The sentence naming a sweep's chosen values and those ``bench families`` uses."""
    return (
        f"Chosen: {', '.join(f'{k} {v}' for k, v in choice.items())}; `bench families` uses "
        f"{', '.join(f'{k} {v}' for k, v in used.items())}."
    )


TOPK_COLUMNS = (
    ("constant", "constant", ""), ("value", "value", ""), ("kept", "cases kept", "d"),
    ("cases", "cases judged", "d"), ("missed", "below ε_min", "d"),
    ("worst_share", "worst accuracy", ".3f"), ("buffer_mean", "wait ÷ hindsight (mean)", ".2f"),
    ("buffer_max", "… (max)", ".2f"),
)  # fmt: skip

AGG_COLUMNS = (
    ("constant", "constant", ""), ("value", "value", ""), ("kept", "cases meeting (ε, δ)", "d"),
    ("missed", "missed windows", "d"), ("unexcused", "… not judged infeasible", "d"),
    ("worst_share", "worst windows met", ".1%"), ("k_mean_s", "mean K (s)", ".2f"),
)  # fmt: skip


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Missed periods against mean buffer, one point per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        ax.scatter(r["buffer_mean"], r["missed"], color="black" if r["constant"] == "default" else "C0")
        ax.annotate(f"{r['constant']} {r['value']}", (r["buffer_mean"], r["missed"]), fontsize=7)
    ax.set_xlabel("mean buffer ÷ hindsight's (tuning part)")
    ax.set_ylabel("missed periods")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(
    out: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Run every variant on the tuning part and write the report (no Spark: exact set forms)."""
    del data_dir, spark_on
    t0 = time.monotonic()
    todo = cases(quick)
    with ProcessPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        records = [r for rs in pool.map(run_case, todo) for r in rs]
        agg_records = [r for rs in pool.map(run_aggregate_case, todo) for r in rs]
        topk_records = [r for rs in pool.map(run_topk_case, todo) for r in rs]
    rows = scores(records)  # the defaults first, then each constant's values (the sweep's order)
    agg_rows = aggregate_scores(agg_records)
    topk_rows = topk_scores(topk_records)
    base = families.job_of(todo[0].workload, families.Q_USERS[0]).adaptation()
    tuning, _ = families.parts(quick)
    meta: dict[str, Any] = {
        "command": "bash infra/bench.sh tuning" + (" --quick" if quick else ""),
        "machine": machine(),
        "seconds": round(time.monotonic() - t0, 1),
        "workloads": [w.name for w in tuning.workloads],
        "families": list(tuning.families),
        "cases": len(todo) * len(families.Q_USERS),
        "defaults": {k: getattr(base, k) for k in SWEEP},
        "defaults_hold": defaults_hold(rows),
        "variants": rows,
        "aggregate_defaults": {
            "horizon_windows": family_operators.HORIZON_WINDOWS,
            "memory": _AGG_STAGE.memory,
            "headroom": _AGG_STAGE.headroom,
        },
        "aggregate_choice": aggregate_choice(agg_rows),
        "aggregate_variants": agg_rows,
        "aggregate_records": agg_records,
        "topk_defaults": {"horizon_us": family_operators.TOPK_HORIZON_US, "n": family_operators.TOPK_N},
        "topk_choice": choice(topk_rows, TOPK_SWEEP),
        "topk_variants": topk_rows,
        "topk_records": topk_records,
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "tuning.json", meta, records)
    (out / "tuning.md").write_text(markdown(rows, meta))
    plot(rows, out / "tuning.png")
    log("bench", f"written {out / 'tuning.json'}, {out / 'tuning.md'} in {meta['seconds']:.0f} s")
    return 0
