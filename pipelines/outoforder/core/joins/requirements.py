"""What the next interval requires of a join's retention: QJoin's targets and estimates.

The pieces :mod:`outoforder.core.joins.adaptation` decides with, each a function of plain arrays:
eq. 3's target for the next interval (:func:`interval_target`) and its confidence bound for a
small sample (:func:`confident_target`); the per-pair required retentions, measured
(:func:`lateness_requirements`) or modelled from the delay distributions (the paper's estimator,
:func:`modelled_requirements`); the current delay regime (:func:`regime_start`); and
Algorithm 1's search for the cheapest pair of retentions reaching a target
(:func:`choose_retention`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import NEG
from outoforder.core.joins.query import JoinInput, JoinQuery, R, S

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def interval_target(
    q_user: float, n_true_p_minus_l: float, n_prod_p_minus_l: int, n_l: float, n_pending: float = 0.0
) -> float:
    """Q_L from eq. 3 (clipped to [0, 1]).

    ``n_pending`` of the ``n_true_p_minus_l`` pairs of the history are not known yet (their later
    tuple is still to come): the next retention decides them as well as the next L's ``n_l``, so
    they share the target instead of counting as lost.

    >>> interval_target(0.9, 900, 800, 100.0)   # 800 of 900 made; 100 expected next: need all
    1.0
    >>> interval_target(0.9, 900, 900, 100.0)
    0.0
    >>> round(interval_target(0.9, 1000, 850, 100.0, n_pending=100), 3)   # 100 of 1,000 to come
    0.7
    """
    if n_l + n_pending <= 0:
        return q_user
    q = (q_user * (n_true_p_minus_l + n_l) - n_prod_p_minus_l) / (n_l + n_pending)
    return float(min(1.0, max(0.0, q)))


def confident_target(q: float, n_samples: float, confidence: float) -> float:
    """The share of a sample to cover so that its population's ``q`` is covered with ``confidence``.

    With n sampled requirements, the retention covering j of them covers the population's
    q-quantile unless fewer than j samples lie below it: P[Binomial(n, q) <= j - 1]. The result
    is j / n for the smallest j reaching ``confidence`` (1.0 when even the largest sample is not
    enough, so few pairs aim at the largest requirement seen). A distribution-free upper
    confidence bound on a quantile; it tends to ``q`` as the sample grows.

    >>> confident_target(0.9, 20, 0.9)   # 20 pairs: cover them all
    1.0
    >>> round(confident_target(0.9, 2_000, 0.9), 3)
    0.909
    >>> confident_target(0.9, 0, 0.9)
    0.9
    """
    n = round(n_samples)
    if n <= 0 or q <= 0.0:
        return q
    if q >= 1.0:
        return 1.0
    k = np.arange(n, dtype=np.float64)  # log P[X = k + 1] - log P[X = k] for k = 0 .. n - 1
    log_pmf = np.concatenate([[0.0], np.cumsum(np.log((n - k) / (k + 1)) + np.log(q / (1.0 - q)))])
    cdf = np.cumsum(np.exp(log_pmf - log_pmf.max()))
    below = int(np.searchsorted(cdf / cdf[-1], confidence - 1e-12, side="left"))  # ppf
    return min(1.0, (below + 1) / n)


def reachable_recall(
    req_r: FloatArray, req_s: FloatArray, weight_r: FloatArray, weight_s: FloatArray, bound_us: int
) -> float:
    """The sampled pairs' (weighted) share a retention of ``bound_us`` on both sides would find.

    >>> import numpy as np
    >>> one = np.ones(2)
    >>> reachable_recall(np.array([10.0, 50.0]), np.array([5.0, 500.0]), one, one, 100)
    0.75
    """
    total = float(weight_r.sum() + weight_s.sum())
    if total <= 0:
        return 1.0
    found = float(weight_r[req_r <= bound_us].sum() + weight_s[req_s <= bound_us].sum())
    return found / total


def choose_retention(
    req_r: FloatArray,
    req_s: FloatArray,
    q_l: float,
    grid_us: int,
    max_r: int,
    max_s: int,
    rate_r: float,
    rate_s: float,
    window_us: int,
    weight_r: FloatArray | None = None,
    weight_s: FloatArray | None = None,
) -> tuple[int, int, float]:
    """Algorithm 1 on the separable recall model: the cheapest (d_R, d_S) with Q >= q_l.

    ``req_X`` are required retentions of the pairs whose earlier tuple is on X (all pairs
    together are the denominator), optionally weighted. Returns (d_R, d_S, estimated Q).
    """
    w_r = np.ones(req_r.size) if weight_r is None else weight_r
    w_s = np.ones(req_s.size) if weight_s is None else weight_s
    total = float(w_r.sum() + w_s.sum())
    if total <= 0:
        return 0, 0, 1.0
    grid_r = np.arange(0, max(max_r, 0) + grid_us, grid_us, dtype=np.int64)
    grid_s = np.arange(0, max(max_s, 0) + grid_us, grid_us, dtype=np.int64)

    def covered(req: FloatArray, w: FloatArray, grid: IntArray) -> FloatArray:
        order = np.argsort(req, kind="stable")
        cum = np.concatenate([[0.0], np.cumsum(w[order])])
        return cum[np.searchsorted(req[order], grid, side="right")] / total

    a_r = covered(req_r, w_r, grid_r)
    a_s = covered(req_s, w_s, grid_s)
    need_s = q_l - a_r - 1e-12
    j = np.searchsorted(a_s, need_s, side="left")  # a_s is non-decreasing
    feasible = j < grid_s.size
    if not feasible.any():
        return int(grid_r[-1]), int(grid_s[-1]), float(a_r[-1] + a_s[-1])
    i_ok = np.flatnonzero(feasible)
    cost = (grid_r[i_ok] + window_us) * rate_r + (grid_s[j[i_ok]] + window_us) * rate_s
    best = i_ok[int(np.argmin(cost))]
    return int(grid_r[best]), int(grid_s[j[best]]), float(a_r[best] + a_s[j[best]])


def _coarse(delays: IntArray, g: int) -> IntArray:
    """Delays rounded up to the granularity g (the paper's D buckets)."""
    return (np.ceil(delays / g) * g).astype(np.int64) if delays.size else delays


def modelled_requirements(
    delays_r: IntArray,
    delays_s: IntArray,
    rate_r: float,
    rate_s: float,
    query: JoinQuery,
    granularity_us: int,
    basic_window_us: int,
    seed: int = 0,
    draws: int = 20_000,
) -> tuple[FloatArray, FloatArray]:
    """The paper estimator's required retentions, drawn from f_D and the basic windows."""
    rng = np.random.default_rng(seed)
    if delays_r.size == 0 or delays_s.size == 0:
        return np.zeros(0), np.zeros(0)
    b = basic_window_us
    n_bw = max(1, 2 * query.window_us // b + 1)
    offset = (rng.integers(0, n_bw, draws) * b - query.window_us).astype(np.float64)  # s.ts - r.ts
    d_r = rng.choice(_coarse(delays_r, granularity_us), draws).astype(np.float64)
    d_s = rng.choice(_coarse(delays_s, granularity_us), draws).astype(np.float64)
    arrive_r = d_r  # relative to r.ts
    arrive_s = offset + d_s
    r_first = arrive_r <= arrive_s
    # progress at the later arrival ≈ later.ts + its delay; required d = T - w - earlier.ts
    req_when_r_first = (offset + d_s) - query.window_us  # earlier = r (ts 0)
    req_when_s_first = (0.0 + d_r) - offset - query.window_us  # earlier = s (ts offset)
    weight = np.where(r_first, rate_s, rate_r)  # the later side's rate drives how often it probes
    keep = rng.random(draws) < weight / max(rate_r, rate_s, 1e-12)
    return (
        np.maximum(req_when_r_first[r_first & keep], 0.0),
        np.maximum(req_when_s_first[~r_first & keep], 0.0),
    )


@dataclass(frozen=True)
class RegimeView:
    """Where the current delay regime began, and since when arrivals have been scarce."""

    start_us: int  # the regime's intervals hold the arrivals with progress above this
    held_since_us: int | None  # progress where arrivals fell below 1 / factor of before


def regime_start(
    t: IntArray,
    delays: IntArray,
    at: int,
    interval_us: int,
    period_us: int,
    q: float,
    grid_us: int,
    factor: float = 2.0,
) -> RegimeView:
    """The current regime: the newest intervals L (of the last P) that resemble the newest one.

    An interval is described by its arrivals' count and the ``q``-quantile of their lateness
    (:func:`~outoforder.core.joins.kslack.arrival_delays`). Walking back from the newest, an
    interval stays in the regime while neither differs from the newest one's by more than
    ``factor`` (lateness with a slack of two grid steps, so that calm intervals of a few ms are
    alike). Arrivals are *scarce* when the newest intervals hold fewer than 1 / ``factor`` of the
    median interval of the period before them.

    >>> t = np.repeat(np.arange(10) * 10, 10)  # 10 intervals of 10 µs, 10 arrivals each
    >>> late = np.where(np.arange(100) >= 70, 50, 0)  # the last 3 intervals: lateness 50
    >>> regime_start(t, late, 100, 10, 100, 0.9, 1)
    RegimeView(start_us=60, held_since_us=None)
    """
    now = int(t[at - 1])
    k = max(1, min(period_us // interval_us, (now - int(t[0])) // interval_us + 1))
    edges = now - interval_us * np.arange(k, -1, -1)  # (edges[i], edges[i+1]] is interval i
    idx = np.searchsorted(t[:at], edges, side="right")
    counts = np.diff(idx)
    lat = np.array(
        [float(np.quantile(delays[a:b], q)) if b > a else 0.0 for a, b in pairwise(idx)], dtype=np.float64
    )

    def alike(i: int, j: int) -> bool:
        lo_l, hi_l = sorted((lat[i], lat[j]))
        lo_n, hi_n = sorted((counts[i], counts[j]))
        return bool(hi_l <= factor * lo_l + 2 * grid_us and hi_n <= factor * lo_n + 1)

    first = k - 1
    while first > 0 and alike(first - 1, k - 1):
        first -= 1
    held = None
    before = counts[:first]
    if before.size and counts[k - 1] * factor < float(np.median(before)):
        held = int(edges[first])
    return RegimeView(int(edges[first]), held)


@dataclass(frozen=True)
class WeightedSample:
    """Required retentions, their weights, and how many independent observations they come from."""

    values: FloatArray
    weights: FloatArray
    observed: int  # the independent observations behind the values

    @property
    def size(self) -> int:
        """How many required retentions."""
        return int(self.values.size)


def lateness_requirements(
    inp: JoinInput,
    t: IntArray,
    at: int,
    since_us: int,
    pairs_r: float,
    pairs_s: float,
    offsets: tuple[FloatArray, FloatArray],
) -> tuple[WeightedSample, WeightedSample]:
    """Requirements of R-earlier and S-earlier pairs modelled from the arrivals since ``since_us``.

    A pair whose earlier tuple is on R needs ``T(s) - w - r.ts = lateness(s) + (s.ts - r.ts) - w``,
    where ``lateness(s) = T(s) - s.ts`` when its S partner arrives: every recent S arrival's
    lateness is combined with every offset ``s.ts - r.ts - w`` of the sampled pairs (50 quantiles;
    ``offsets``), or taken alone, an upper bound, when the side has no sampled pair. Each side is
    weighted to the share of its pairs (half each without pairs).
    """
    recent = np.arange(at) >= np.searchsorted(t[:at], since_us, side="right")
    valid = recent & (t[:at] > NEG)
    late = np.maximum(t[:at] - inp.ts[:at], 0).astype(np.float64)
    share_r = pairs_r / (pairs_r + pairs_s) if pairs_r + pairs_s > 0 else 0.5
    out = []
    for k, (partner, share) in enumerate(((S, share_r), (R, 1.0 - share_r))):
        v = late[valid & (inp.side[:at] == partner)]
        n = v.size
        if offsets[k].size:
            o = np.quantile(offsets[k], np.linspace(0, 1, min(offsets[k].size, 50)))
            v = np.maximum((v[:, None] + o[None, :]).ravel(), 0.0)
        out.append(WeightedSample(v, np.full(v.size, share / max(v.size, 1)), n))
    return out[0], out[1]
