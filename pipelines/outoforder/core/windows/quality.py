"""The window coverage an (ε, δ) target needs, and the error of an emitted window result.

A result emitted when a window closes is computed from the ``n`` tuples received by then, out of the
``N`` the window finally holds; its coverage is ``λ = n / N``. The target is
``P(error >= ε) <= δ``. Like HPM (docs/operators.md; after Ji et al. 2015 and Law et al.), we treat the
received tuples as a simple random sample *without replacement* of the window: lateness is assumed
independent of the value. Then the coverage a target needs, ``λ_thr``, follows from sampling theory.

What is emitted, and the error measure, per aggregate (the stream emits the aggregate *of what it
received*; nothing is scaled up, so the repair's exact value replaces it without a change of meaning):

``count``
    relative error ``1 − λ``, exactly, whatever the values: ``λ_thr = 1 − ε``.
``sum``
    relative error ``|1 − r|`` with ``r = S_rcv / S``. Under the sampling model ``E[r] = λ`` and
    ``Var(r) = λ(1 − λ)·cv² / (N − 1)`` (the sample mean's variance ``σ²(N − n) / (n(N − 1))``
    times ``(n / (Nμ))²``; ``cv = σ / |μ|``). With the normal approximation and
    ``z = Φ⁻¹(1 − δ/2)``, the target holds when ``(1 − λ) + z·cv·sqrt(λ(1 − λ)/(N − 1)) <= ε``:
    the bias of the missing share plus the sampling spread. ``λ_thr`` is the smallest such ``λ``
    (bisection on ``[1 − ε, 1]``, where the left side decreases).
``avg``
    relative error of the sample mean: ``z·cv·sqrt((1 − λ)/(λ(N − 1))) <= ε``, so
    ``λ_thr = 1 / (1 + ε²(N − 1) / (z²·cv²))``.
``median``, ``quantile:q``
    *rank* error: the distance between ``q`` and the share of the window at or below the emitted
    value (a value-relative error has no distribution-free bound). The sample quantile's population
    rank has variance ``q(1 − q)(1 − λ)/(λ(N − 1))``, so ``λ_thr = 1 / (1 + ε²(N − 1)/(z²·q(1 − q)))``.
``min``, ``max``
    the result can only be wrong if the window's extreme tuple is missing, which happens with
    probability ``1 − λ``: ``λ_thr = 1 − δ`` (distribution-free and conservative; ε is not used).

The variance enters once. Squaring it (``cv⁴`` for ``cv²``, a mistake in a public implementation)
asks for far too little coverage when ``cv < 1`` and far too much when ``cv > 1``; the Monte-Carlo
test in ``tests/core/windows`` checks each formula against simulated sampling.

At emission ``N`` and ``cv`` are unknown: we use the received ``n`` for ``N`` (``λ_thr`` falls as N
grows, so this errs on the safe side) and the received values' ``cv``.

>>> round(float(lambda_threshold("count", 0.05, 0.05, n=1000, cv=1.0)[0]), 4)
0.95
>>> round(float(lambda_threshold("avg", 0.05, 0.05, n=1000, cv=1.0)[0]), 4)
0.606
>>> round(float(lambda_threshold("sum", 0.05, 0.05, n=1000, cv=0.5)[0]), 4)
0.9563
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from outoforder.core.windows.aggregate import grouped_aggregates, parse_aggregate
from outoforder.core.windows.assign import Windows
from outoforder.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def check_target(eps: float, delta: float) -> None:
    """ε and δ must both lie in (0, 1)."""
    if not (0.0 < eps < 1.0 and 0.0 < delta < 1.0):
        msg = f"(ε, δ) must both be in (0, 1), got ({eps}, {delta})"
        raise ConfigError(msg)


def z_two_sided(delta: float) -> float:
    """Φ⁻¹(1 − δ/2)."""
    return NormalDist().inv_cdf(1.0 - delta / 2.0)


def lambda_threshold(
    name: str, eps: float, delta: float, n: IntArray | int, cv: FloatArray | float
) -> FloatArray:
    """λ_thr per window from its received count ``n`` and values' coefficient of variation ``cv``.

    Vectorised. A window with fewer than two tuples needs full coverage (except count/min/max).
    """
    check_target(eps, delta)
    kind, q = parse_aggregate(name)
    n_arr = np.atleast_1d(np.asarray(n, dtype=np.float64))
    cv_arr = np.broadcast_to(np.abs(np.asarray(cv, dtype=np.float64)), n_arr.shape)
    if kind == "count":
        return np.full(n_arr.shape, 1.0 - eps)
    if kind in ("min", "max"):
        return np.full(n_arr.shape, 1.0 - delta)
    z = z_two_sided(delta)
    dof = np.maximum(n_arr - 1.0, 0.0)
    if kind == "quantile":
        spread = np.full(n_arr.shape, q * (1.0 - q))
        if q >= 1.0:  # the maximum
            return np.full(n_arr.shape, 1.0 - delta)
    else:
        spread = cv_arr**2
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(spread > 0, eps**2 * dof / (z**2 * spread), np.inf)
    a = np.where(np.isnan(a), 0.0, a)
    if kind in ("avg", "quantile"):
        return np.where(np.isinf(a), 0.0, 1.0 / (1.0 + a))
    # sum: smallest λ in [1 − ε, 1] with (1 − λ) + z·cv·sqrt(λ(1 − λ)/(N − 1)) <= ε
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(dof > 0, z * cv_arr / np.sqrt(dof), np.where(cv_arr > 0, np.inf, 0.0))
    if n_arr.size == 1:  # one closing window (the tuple-at-a-time operators): on floats, far quicker
        return np.full(n_arr.shape, _sum_threshold(eps, float(scale.flat[0])))
    lo = np.full(n_arr.shape, 1.0 - eps)
    hi = np.ones(n_arr.shape)
    with np.errstate(invalid="ignore"):
        for _ in range(60):
            mid = (lo + hi) / 2.0
            spread_now = scale * np.sqrt(mid * (1.0 - mid))  # nan where an infinite scale meets 0
            ok = ((1.0 - mid) + spread_now <= eps) & ~np.isnan(spread_now)
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
    return hi


def _sum_threshold(eps: float, scale: float) -> float:
    """The bisection of :func:`lambda_threshold`'s ``sum`` for one window, step for step the same."""
    lo, hi = 1.0 - eps, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2.0
        spread_now = scale * math.sqrt(mid * (1.0 - mid))
        if (1.0 - mid) + spread_now <= eps and not math.isnan(spread_now):
            hi = mid
        else:
            lo = mid
    return hi


def received_cv(count: FloatArray, total: FloatArray, total_sq: FloatArray) -> FloatArray:
    """Coefficient of variation (population σ / |mean|) from count, Σv and Σv² (inf when mean is 0)."""
    n = np.maximum(count, 1.0)
    mean = total / n
    var = np.maximum(total_sq / n - mean**2, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        cv = np.sqrt(var) / np.abs(mean)
    return np.where(np.abs(mean) > 0, cv, np.where(var > 0, np.inf, 0.0))


def rank_error(q: float, below: IntArray, at_or_below: IntArray, n: IntArray) -> FloatArray:
    """Distance from ``q`` to the rank interval ``(below/n, at_or_below/n]`` a value occupies."""
    lo = below / np.maximum(n, 1)
    hi = at_or_below / np.maximum(n, 1)
    return np.where(q <= lo, lo - q, np.where(q > hi, q - hi, 0.0))


def relative_error(emitted: FloatArray, exact: FloatArray) -> FloatArray:
    """|emitted − exact| / |exact|; 0 when both are 0, inf when only the exact value is 0."""
    e, x = np.asarray(emitted, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    diff = np.abs(e - x)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / np.abs(x)
    return np.where(x != 0, rel, np.where(diff == 0, 0.0, np.inf))


def emission_errors(
    ts: IntArray, values: FloatArray, windows: Windows, name: str, window_ids: IntArray, emitted: FloatArray
) -> tuple[IntArray, FloatArray]:
    """(every window of the input, the error of its emitted result against the exact one).

    The measure of the module docstring: relative error, or rank error for quantiles. A window
    without an emitted result (``window_ids`` lacks it) has error ``inf``.
    """
    kind, q = parse_aggregate(name)
    idx, wid = windows.explode(np.asarray(ts, dtype=np.int64))
    v = np.asarray(values, dtype=np.float64)[idx]
    ids, exact = grouped_aggregates(wid, v, name)
    got = np.full(ids.size, np.nan)
    pos = np.searchsorted(ids, window_ids)
    ok = (
        (pos < ids.size) & (ids[np.minimum(pos, max(ids.size - 1, 0))] == window_ids) if ids.size else pos < 0
    )
    got[pos[ok]] = np.asarray(emitted, dtype=np.float64)[ok]
    if kind == "quantile":
        member_pos = np.searchsorted(ids, wid)
        ref = got[member_pos]
        below = np.bincount(member_pos, weights=(v < ref), minlength=ids.size).astype(np.int64)
        at = np.bincount(member_pos, weights=(v <= ref), minlength=ids.size).astype(np.int64)
        n = np.bincount(member_pos, minlength=ids.size).astype(np.int64)
        err = rank_error(q, below, at, n)
    else:
        err = relative_error(got, exact)
    return ids, np.where(np.isnan(got), np.inf, err)
