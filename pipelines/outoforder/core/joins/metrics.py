"""Quality and cost of a join run, measured against the exact join (not estimated).

A result pair belongs to the period of its later event time (the first moment an ideal join could
produce it): ``floor((max(r.ts, s.ts) - origin) / P)``. Recall of a period = produced pairs of
that period / true pairs of that period; periods without true pairs have no recall.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import NEG, joint_progress
from outoforder.core.joins.qjoin import JoinRun
from outoforder.core.joins.query import JoinInput, PairArray

IntArray = npt.NDArray[np.int64]
MET_TOLERANCE = 1e-12  # a period at exactly Q_user meets it, whatever the float rounding


@dataclass(frozen=True)
class PeriodQuality:
    """Recall of one period."""

    period: int
    start_us: int
    true_pairs: int
    produced_pairs: int
    recall: float
    met: bool


def period_of(inp: JoinInput, pairs: PairArray, origin_us: int, period_us: int) -> IntArray:
    """The period of each pair: that of its later event time."""
    later_ts = np.maximum(inp.ts[pairs[:, 0]], inp.ts[pairs[:, 1]])
    return ((later_ts - origin_us) // period_us).astype(np.int64)


def least_count(n_true: int, q_user: float) -> int:
    """The fewest produced pairs out of ``n_true`` with which a period meets ``q_user``.

    >>> least_count(20, 0.95), least_count(7, 0.95), least_count(3, 0.0)
    (19, 7, 0)
    """
    c = max(int(np.ceil(q_user * n_true)), 0)
    while c > 0 and (c - 1) / n_true >= q_user - MET_TOLERANCE:
        c -= 1
    while c < n_true and c / n_true < q_user - MET_TOLERANCE:
        c += 1
    return c


def period_recall(
    inp: JoinInput,
    truth: PairArray,
    produced: PairArray,
    period_us: int,
    q_user: float,
    origin_us: int | None = None,
) -> list[PeriodQuality]:
    """Recall per period; ``produced`` must be a subset of ``truth`` (checked)."""
    origin = int(inp.ts.min()) if origin_us is None and len(inp) else int(origin_us or 0)
    if produced.size:
        width = len(inp) + 1
        t_codes = truth[:, 0] * width + truth[:, 1]
        if t_codes.size > 1 and not (t_codes[1:] >= t_codes[:-1]).all():
            t_codes = np.sort(t_codes)
        p_codes = produced[:, 0] * width + produced[:, 1]
        at = np.minimum(np.searchsorted(t_codes, p_codes), max(t_codes.size - 1, 0))
        if t_codes.size == 0 or not (t_codes[at] == p_codes).all():
            msg = "produced pairs that are not true pairs: the operator is wrong"
            raise AssertionError(msg)
    if truth.shape[0] == 0:
        return []
    tp = period_of(inp, truth, origin, period_us)
    first = int(tp.min())
    n_true = np.bincount(tp - first)
    n_prod = np.bincount(period_of(inp, produced, origin, period_us) - first, minlength=n_true.size)
    out = []
    for k in np.flatnonzero(n_true):
        p = first + int(k)
        rec = int(n_prod[k]) / int(n_true[k])
        out.append(
            PeriodQuality(
                p, origin + p * period_us, int(n_true[k]), int(n_prod[k]), rec, rec >= q_user - MET_TOLERANCE
            )
        )
    return out


def period_costs(
    inp: JoinInput, run: JoinRun, period_us: int, origin_us: int | None = None
) -> dict[int, dict[str, float]]:
    """Memory and latency per period: buffered tuples per stream (mean, max), latency (mean, p95).

    An arrival belongs to the period of the joint progress T after it (the first period before
    T exists).
    """
    n = len(inp)
    if n == 0 or run.buffered.shape[0] != n:
        return {}
    origin = int(inp.ts.min()) if origin_us is None else origin_us
    t = joint_progress(inp)
    period = np.maximum((np.where(t > NEG, t, origin) - origin) // period_us, 0)
    out: dict[int, dict[str, float]] = {}
    for p in np.unique(period):
        mine = period == p
        lat = run.latency[mine]
        lat = lat[lat >= 0]
        out[int(p)] = {
            "buffered_mean_r": float(run.buffered[mine, 0].mean()),
            "buffered_mean_s": float(run.buffered[mine, 1].mean()),
            "buffered_max_r": float(run.buffered[mine, 0].max()),
            "buffered_max_s": float(run.buffered[mine, 1].max()),
            "latency_mean_us": float(lat.mean()) if lat.size else 0.0,
            "latency_p95_us": float(np.percentile(lat, 95)) if lat.size else 0.0,
        }
    return out


def summarize(
    inp: JoinInput, truth: PairArray, run: JoinRun, period_us: int, q_user: float, drop_first_periods: int = 0
) -> dict[str, Any]:
    """Headline figures of a run: recall, share of periods meeting the target, memory, latency."""
    periods = period_recall(inp, truth, run.pairs, period_us, q_user)[drop_first_periods:]
    recalls = np.array([p.recall for p in periods]) if periods else np.zeros(0)
    buffered = run.buffered.sum(axis=1) if run.buffered.size else np.zeros(1, np.int64)
    lat = run.latency[run.latency >= 0] if run.latency.size else np.zeros(0, np.int64)
    costs = period_costs(inp, run, period_us)
    return {
        "true_pairs": int(truth.shape[0]),
        "produced_pairs": int(run.pairs.shape[0]),
        "recall_overall": float(run.pairs.shape[0] / truth.shape[0]) if truth.shape[0] else 1.0,
        "recall_mean": float(recalls.mean()) if recalls.size else 1.0,
        "recall_min": float(recalls.min()) if recalls.size else 1.0,
        "periods": len(periods),
        "periods_meeting_target": float(np.mean([p.met for p in periods])) if periods else 1.0,
        "buffered_mean": float(buffered.mean()),
        "buffered_max": int(buffered.max()),
        "buffered_mean_r": float(run.buffered[:, 0].mean()) if run.buffered.size else 0.0,
        "buffered_mean_s": float(run.buffered[:, 1].mean()) if run.buffered.size else 0.0,
        "latency_mean_us": float(lat.mean()) if lat.size else 0.0,
        "latency_p95_us": float(np.percentile(lat, 95)) if lat.size else 0.0,
        "late_dropped": int(run.late.sum()),
        "per_period": [{**asdict(p), **costs.get(p.period, {})} for p in periods],
    }
