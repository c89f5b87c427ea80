"""Choosing retention (QJoin) and slack (AQ-K-slack) every L so that recall per period meets Q_user.

Every L of stream progress the controller looks at the recent history and sets the parameters
for the next L (docs/operators.md, QJoin):

1. The quality the next L must deliver (the paper's eq. 3): the period ending one L from now is
   (P - L) of history plus the next L, so ``(N'_{P-L} + N_L·Q_L) / N_P >= Q_user`` gives
   ``Q_L = (Q_user·N_P - N'_{P-L}) / N_L`` (clipped to [0, 1]), with N_L estimated as the number
   of true pairs in the last L and N_P = N_{P-L} + N_L.
2. The estimated recall of candidate retentions splits by the side of the earlier-arriving tuple
   of a pair, because only that tuple has to be buffered: ``Q(d_R, d_S) = A_R(d_R) + A_S(d_S)``,
   where ``A_X(d)`` is the share of pairs whose earlier tuple is on X and needs at most d.
   Two estimators supply the per-pair *required retention* ``T(later) - w - earlier.ts``:

   - ``learned``: from the exact join of the arrivals so far (bronze holds every tuple, so the
     true pairs seen so far are known exactly) -- what the last P actually required, each pair
     weighted by the inverse of the probability that a pair of its age is already known (pairs
     with a very late tuple surface late; without the weight recent windows look too good);
   - ``paper``: modelled from the coarse delay distributions f_D of each stream (granularity g)
     and basic windows of size b: a pair's time offset is uniform over the basic windows of the
     window, each tuple's delay is drawn from its stream's f_D, the earlier-arriving tuple must
     still be buffered when the later one arrives (T at that moment ≈ later.ts + its delay). This
     keeps the paper's ingredients (f_D, b, g, rates) where its eqs. 7 and 11 are garbled.
3. Algorithm 1's search over the grid g: for each d_R, the smallest d_S reaching Q_L; keep the pair
   with the fewest buffered tuples ``(d_R + w)·V_R + (d_S + w)·V_S``, within [0, Maxd_X].

   - ``reactive``: the learned estimator on the newest evidence, for delays that change abruptly
     (:func:`regime_start`): the pairs *completed* since the current regime began (by progress
     when their later tuple arrived, so no completeness weight is needed: in a steady regime
     the requirements of pairs completed in any stretch of progress are those of all pairs),
     and, while fewer tuples arrive than before (a link holding them back), at least the time
     since the drop began, since the held tuples will be at least that late;
   - ``robust``: ``reactive``, and step 1 never aims below ``Q_user + headroom·(1 - Q_user)``.
     Eq. 3 spends a period's surplus: after a good stretch Q_L drops towards 0, the retention
     collapses, and when the delays turn worse in that interval its evicted tuples are lost for
     good; the next interval then needs Q_L = 1. Under regime shifts Q_L swings between 0 and 1
     every L. A surplus says nothing about the next interval, so this estimator does not spend it.
     Two guards for sparse streams, where a period holds few pairs: eq. 3's target becomes a
     confidence bound (:func:`confident_target`, counting pairs that share their later tuple
     once, since they share its lateness) rather than the sample's point estimate -- the floor and
     the bound each hold, neither is paid on top of the other; and while it has fewer than
     ``min_regime_pairs`` such observations, each side keeps at least what the other side's
     recent arrivals bound (a pair needs at most its later tuple's lateness ``T - ts``), so a side
     that went a period without a late partner does not drop its buffer before the next one.
     And it remembers: both sides keep at least what each of the last ``memory_periods`` periods
     needed in hindsight (:func:`remembered_need`), times ``1 + memory_margin``: the next outage or
     burst is seldom the same as the last, and a period that needs a little more than any before
     it is lost for good (the margin spends some of the buffer that a constant retention, which
     must cover the worst period all the time, would spend anyway). A link's outages or bursts of
     congestion that recur every few minutes are over before the regime view reacts, and have
     left it by the next one; a causal controller meets such periods only by keeping what the
     last ones needed. A period that needs more than any before it (a record) no controller
     reading the past is sure to meet: :mod:`outoforder.core.joins.feasibility` says
     which periods those were.

The estimates themselves are in :mod:`outoforder.core.joins.requirements`; the baseline AQ-K-slack
in :mod:`outoforder.core.joins.aq_kslack`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from outoforder.core.joins.progress import NEG
from outoforder.core.joins.query import JoinInput, JoinQuery, PairArray, R, S
from outoforder.core.joins.requirements import (
    RegimeView,
    choose_retention,
    confident_target,
    interval_target,
    lateness_requirements,
    modelled_requirements,
    reachable_recall,
    regime_start,
)
from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Estimator = Literal["learned", "paper", "reactive", "robust"]
ESTIMATORS: tuple[Estimator, ...] = ("learned", "paper", "reactive", "robust")


@dataclass(frozen=True)
class AdaptationSettings:
    """The user's target and the controller's cadence (defaults: the paper's)."""

    q_user: float = 0.95
    period_us: int = 60_000_000  # P
    interval_us: int = 1_000_000  # L
    basic_window_us: int = 10_000  # b
    granularity_us: int = 10_000  # g
    estimator: Estimator = "learned"
    initial_us: int = 0  # d (or K) before the first adaptation
    seed: int = 0  # the paper estimator's Monte Carlo draws
    headroom: float = 0.0  # robust: Q_L >= Q_user + headroom·(1 - Q_user)
    max_retention_us: int | None = None  # the user's bound on d_R, d_S (None: none)
    memory_periods: int = 0  # robust: keep what each of the last M periods needed in hindsight
    memory_margin: float = 0.0  # robust: ... times (1 + this): a record rarely beats the last by more
    # robust's thresholds (chosen on the families benchmark's tuning part, docs/benchmarks/tuning.md)
    confidence: float = 0.9  # the chance that a retention chosen from a sample reaches its target
    min_regime_pairs: int = 200  # fewer observations in a regime: its requirements are not yet known
    regime_factor: float = 1.25  # intervals whose lateness or arrival count differ more: other regimes

    def __post_init__(self) -> None:
        if not 0.0 < self.q_user <= 1.0:
            msg = f"q_user must be in (0, 1], got {self.q_user}"
            raise ConfigError(msg)
        if not 0 < self.interval_us < self.period_us:
            msg = f"need 0 < L ({self.interval_us}) < P ({self.period_us})"
            raise ConfigError(msg)
        if self.granularity_us <= 0 or self.basic_window_us <= 0:
            msg = "granularity g and basic window b must be > 0"
            raise ConfigError(msg)
        if self.estimator not in ESTIMATORS:
            msg = f"estimator must be one of {', '.join(ESTIMATORS)}, got {self.estimator!r}"
            raise ConfigError(msg)
        if not 0.0 <= self.headroom < 1.0:
            msg = f"headroom must be in [0, 1), got {self.headroom}"
            raise ConfigError(msg)
        if self.memory_periods < 0 or self.memory_margin < 0:
            msg = f"the memory and its margin must be >= 0, got {self.memory_periods}, {self.memory_margin}"
            raise ConfigError(msg)
        if not 0.0 < self.confidence < 1.0:
            msg = f"the confidence must be in (0, 1), got {self.confidence}"
            raise ConfigError(msg)
        if self.min_regime_pairs < 0 or self.regime_factor <= 1.0:
            msg = (
                f"need min_regime_pairs >= 0 and regime_factor > 1, got {self.min_regime_pairs} "
                f"and {self.regime_factor}"
            )
            raise ConfigError(msg)
        if self.max_retention_us is not None and self.max_retention_us < 0:
            msg = f"the retention bound must be >= 0, got {self.max_retention_us}"
            raise ConfigError(msg)

    @property
    def q_floor(self) -> float:
        """The lowest Q_L an interval may aim at: 0 for the seed's estimators (eq. 3 as published).

        >>> AdaptationSettings(q_user=0.9, estimator="robust", headroom=0.5).q_floor
        0.95
        >>> AdaptationSettings(q_user=0.9, estimator="learned", headroom=0.5).q_floor
        0.0
        """
        if self.estimator != "robust":
            return 0.0
        return round(self.q_user + self.headroom * (1.0 - self.q_user), 12)


@dataclass(frozen=True)
class Adaptation:
    """One decision: when, what target, what was chosen, and the statistics it came from."""

    at_index: int
    progress_us: int
    q_l: float
    d_r_us: int
    d_s_us: int
    estimated_q: float
    stats: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for the parameters table)."""
        return asdict(self)


MEASURED_PERIODS = 2  # robust: the trailing periods a decision measures itself; older ones it remembers


def remembered_need(
    req: FloatArray,
    pair_time: IntArray,
    known: npt.NDArray[np.bool_],
    now: int,
    st: AdaptationSettings,
    earlier: Sequence[tuple[int, int]] = (),
    start_us: int | None = None,
) -> tuple[int, int, int, bool]:
    """The largest retention one of the last ``st.memory_periods`` periods needed for Q_user.

    A period's need is the Q_user-quantile of its known pairs' required retentions (what the
    best constant retention for that period alone keeps). A decision measures the last
    :data:`MEASURED_PERIODS` periods back from ``now`` itself: the one in progress and the one
    before, complete by then but for pairs later than a period. It remembers the rest from what
    the decisions of the memory's older periods measured of *their* complete period: ``earlier``
    holds their (progress, measured need). Only complete periods are remembered, and only those
    after ``start_us`` (the stream's first progress): a period in progress, or one reaching back
    before the stream began, measures a few pairs (the start's backlog, say) and would outlive
    itself by the whole memory. So a scheduled decision reads a bounded history however long the memory,
    and the in-sequence controller decides the same. Returns the remembered need, the needs of
    the period in progress and of the one before it, and whether that one is complete (later
    decisions remember it then).

    >>> st = AdaptationSettings(q_user=0.5, period_us=10, interval_us=1, memory_periods=4)
    >>> req = np.array([1.0, 2.0, 30.0, 40.0, 500.0, 600.0])
    >>> times = np.array([19, 18, 9, 8, -1, -2])   # two pairs in each of the last three periods
    >>> remembered_need(req, times, np.ones(6, dtype=bool), 20, st)   # the third is not measured
    (30, 1, 30, True)
    >>> remembered_need(req, times, np.ones(6, dtype=bool), 20, st, [(5, 500), (9, 7)])   # remembered
    (500, 1, 30, True)
    >>> remembered_need(req, times, np.ones(6, dtype=bool), 20, st, [(-1, 900)])   # four periods ago
    (30, 1, 30, True)
    >>> remembered_need(req, times, np.ones(6, dtype=bool), 20, st, start_us=5)   # not a whole period
    (30, 1, 30, False)
    """
    needs = [0, 0]
    for k in range(min(st.memory_periods, MEASURED_PERIODS)):
        mine = known & (pair_time > now - (k + 1) * st.period_us) & (pair_time <= now - k * st.period_us)
        if mine.any():
            r = np.sort(req[mine])
            needs[k] = int(np.ceil(r[max(int(np.ceil(st.q_user * r.size)) - 1, 0)]))
    since = now - (st.memory_periods - MEASURED_PERIODS) * st.period_us
    older = [n for at, n in earlier if since <= at < now] if st.memory_periods > MEASURED_PERIODS else []
    complete = start_us is None or now - MEASURED_PERIODS * st.period_us >= start_us
    return max([*needs, *older]), needs[0], needs[1], complete


def adaptation_points(progress: IntArray, interval_us: int) -> list[int]:
    """Arrival indices at which T first reaches each multiple of L after the first T."""
    valid = np.flatnonzero(progress > NEG)
    if valid.size == 0:
        return []
    t0 = int(progress[valid[0]])
    marks = t0 + interval_us * np.arange(1, max(1, (int(progress[-1]) - t0) // interval_us) + 1)
    pts = np.searchsorted(progress, marks, side="left")
    return sorted({int(p) for p in pts if 0 < p < progress.size})


def decide_at(
    window: JoinInput,
    query: JoinQuery,
    settings: AdaptationSettings,
    pairs: PairArray,
    progress: IntArray,
    delays: IntArray,
    produced: npt.NDArray[np.bool_],
    remembered: Sequence[tuple[int, int]],
    first_progress_us: int,
) -> Adaptation:
    """One decision after the last arrival of ``window``, the history it looks at.

    What :class:`~outoforder.core.joins.adaptive.AdaptiveQJoin` asks at each mark: ``pairs`` are
    the true pairs among the window's arrivals (indices into it, in a fixed order), ``produced``
    whether the join produced each, ``progress`` and ``delays`` each arrival's T and delay over
    the whole stream, ``first_progress_us`` the stream's first T.
    """
    earlier, later = pairs.min(axis=1), pairs.max(axis=1)
    return _decide(
        window,
        query,
        settings,
        pairs,
        earlier,
        later,
        window.side[earlier],
        progress,
        delays,
        np.ones(pairs.shape[0], dtype=bool),
        produced,
        len(window),
        remembered,
        first_progress_us,
    )


def earlier_needs(steps: Sequence[Adaptation]) -> list[tuple[int, int]]:
    """(progress, measured need) of the decisions that measured one (:func:`remembered_need`)."""
    return [(s.progress_us, int(s.stats["measured_need_us"])) for s in steps if "measured_need_us" in s.stats]


def _decide(
    inp: JoinInput,
    query: JoinQuery,
    st: AdaptationSettings,
    pairs: PairArray,
    earlier: IntArray,
    later: IntArray,
    e_side: IntArray,
    t: IntArray,
    delays: IntArray,
    decided: npt.NDArray[np.bool_],
    produced: npt.NDArray[np.bool_],
    at: int,
    earlier_needs: Sequence[tuple[int, int]],
    first_progress_us: int,
) -> Adaptation:
    now = int(t[at - 1])
    # only the pairs known by now count; kept in their order, so that every sum adds the same terms
    # in the same order as over the full arrays
    sel = np.flatnonzero(decided & (later < at))
    earlier, later, e_side, produced = earlier[sel], later[sel], e_side[sel], produced[sel]
    t_later = t[later]
    # A pair belongs to the time of its later event (as in the metrics). Pairs whose late tuple
    # has not arrived yet are unknown, so recent windows look more complete than they will be:
    # weight each known pair by 1 / P[a pair of its age is already known], estimated from the
    # lag (progress when it became known - its time) of pairs older than one period.
    pair_time = np.maximum(inp.ts[earlier], inp.ts[later])
    lag = np.maximum(t_later - pair_time, 0)
    old = pair_time <= now - st.period_us
    ref_lag = np.sort(lag[old] if old.sum() >= 100 else lag)
    age = np.maximum(now - pair_time, 0)
    complete = np.searchsorted(ref_lag, age, side="right") / max(ref_lag.size, 1)
    weight = 1.0 / np.maximum(complete, 0.05)
    in_p = pair_time > now + st.interval_us - st.period_us
    in_l = pair_time > now - st.interval_us
    n_l = float(weight[in_l].sum())
    n_p = float(weight[in_p].sum())
    # the period's pairs still to come (weighted up from the known ones) are decided by the next
    # retentions too. The seed's estimators count them as lost, a hidden margin that their point
    # estimates rely on; robust has its margins in the open (the floor, the confidence bound), and
    # counting them as lost on top kept its Q_L at 1 whenever a slow minority was in flight
    pending = n_p - float(in_p.sum()) if st.estimator == "robust" else 0.0
    q_l = interval_target(st.q_user, n_p, int((in_p & produced).sum()), n_l, pending)
    q_eq3 = q_l
    q_l = max(q_l, st.q_floor)

    def bounded(n_observed: int) -> float:
        # The floor guards the next interval against a change the past has not shown; the
        # confidence bound guards eq. 3's target against a sample too small to trust. Each
        # must hold, but one need not be paid on top of the other.
        return max(confident_target(q_eq3, n_observed, st.confidence), st.q_floor)

    recent = np.arange(at) >= np.searchsorted(t[:at], now - st.interval_us, side="right")
    rates = [float(((inp.side[:at] == s) & recent).sum()) / st.interval_us for s in (R, S)]
    max_d = [int(delays[:at][inp.side[:at] == s].max(initial=0)) for s in (R, S)]
    # the grid's bound per side (the paper's Maxd_X). An R-earlier pair needs at most its S
    # partner's delay, so ours bound each side by the larger of the two (a stream whose clock
    # lags makes the *other* side's pairs wait)
    cap = [max(max_d)] * 2 if st.estimator in ("reactive", "robust") else max_d
    # The last L alone is too young: most of its late pairs are still unknown. Sample the period.
    sample = in_p
    floor_us = 0
    observed = 0
    regime: RegimeView | None = None
    if st.estimator in ("reactive", "robust"):
        regime = regime_start(
            t, delays, at, st.interval_us, st.period_us, st.q_user, st.granularity_us, st.regime_factor
        )
        done_in_regime = t_later > regime.start_us
        # too few pairs in the regime: those completed in the last P, which need what all pairs
        # need in a steady stream (weighting the period's known pairs up instead under-states a
        # slow minority: the pairs still unknown are the ones with a late tuple)
        sample = (
            done_in_regime if done_in_regime.sum() >= st.min_regime_pairs else t_later > now - st.period_us
        )
        weight = np.where(sample, 1.0, 0.0)
        # pairs sharing their later tuple share its lateness: count the independent observations
        observed = np.unique(later[sample]).size
        if st.estimator == "robust":  # few pairs: aim at a bound on what the next L needs
            q_l = bounded(observed)
        if regime.held_since_us is not None:
            floor_us = now - regime.held_since_us + st.interval_us
    if st.estimator != "paper":
        req = (t_later - query.window_us - inp.ts[earlier]).astype(np.float64)
        req_r = req[sample & (e_side == R)]
        req_s = req[sample & (e_side == S)]
        w_r, w_s = weight[sample & (e_side == R)], weight[sample & (e_side == S)]
    else:
        dl = [delays[:at][(inp.side[:at] == s) & recent[:at]] for s in (R, S)]
        req_r, req_s = modelled_requirements(
            dl[0], dl[1], rates[0], rates[1], query, st.granularity_us, st.basic_window_us, st.seed
        )
        w_r, w_s = np.ones(req_r.size), np.ones(req_s.size)
    d_r, d_s, est = choose_retention(
        req_r,
        req_s,
        q_l,
        st.granularity_us,
        cap[0],
        cap[1],
        rates[0],
        rates[1],
        query.window_us,
        w_r,
        w_s,
    )
    # what each guard asked for (which one set the retention explains the decision afterwards)
    guards: dict[str, int] = {"sample_us": max(d_r, d_s)}
    if st.estimator == "robust" and observed < st.min_regime_pairs:
        # Few pairs, and they come in clusters (one late tuple joins several): a side can go a
        # period without a late partner and its retention would collapse, evicting for good what
        # the next late partner needs. Every arrival of the other side bounds what its pairs
        # need (T(later) - w - earlier.ts <= T(later) - later.ts), and arrivals are plentiful.
        off = (inp.ts[later] - inp.ts[earlier] - query.window_us).astype(np.float64)
        m_r, m_s = lateness_requirements(
            inp, t, at, now - st.period_us, float(w_r.sum()), float(w_s.sum()),
            (off[sample & (e_side == R)], off[sample & (e_side == S)]),
        )  # fmt: skip
        q_b = bounded(min(m_r.observed, m_s.observed))
        b_r, b_s, _ = choose_retention(
            m_r.values, m_s.values, q_b, st.granularity_us, cap[0], cap[1], rates[0], rates[1],
            query.window_us, m_r.weights, m_s.weights,
        )  # fmt: skip
        d_r, d_s = max(d_r, b_r), max(d_s, b_s)
        guards["lateness_us"] = max(b_r, b_s)
    if regime is not None and regime.held_since_us is not None:
        guards["held_us"] = floor_us
    if st.estimator == "robust" and st.memory_periods:
        # a disturbance that recurs (a link's outages, bursts of congestion) is over before the
        # regime view can react and has left the regime by the next one: keep what the recent
        # periods needed in hindsight
        remembered, current, previous, complete = remembered_need(
            req, pair_time, np.ones(sel.size, dtype=bool), now, st, earlier_needs, first_progress_us
        )
        guards.update(remembered_us=remembered, current_need_us=current, previous_need_us=previous)
        if complete:  # what later decisions remember of this one (earlier_needs)
            guards["measured_need_us"] = previous
        floor_us = max(floor_us, int(np.ceil(guards["remembered_us"] * (1.0 + st.memory_margin))))
    if floor_us:  # held tuples, a remembered need: keep what they will join with, on the grid
        floor_us = -(-floor_us // st.granularity_us) * st.granularity_us
        d_r, d_s = max(d_r, floor_us), max(d_s, floor_us)
    needed_us = max(d_r, d_s)
    bound = st.max_retention_us
    if bound is not None:  # the user's bound: keep under it, and say what it allows
        d_r, d_s = min(d_r, bound), min(d_s, bound)
        est = min(est, reachable_recall(req_r, req_s, w_r, w_s, bound))
    stats: dict[str, Any] = {
        "estimator": st.estimator,
        "n_true_p": int(in_p.sum()),
        "n_prod_p": int((in_p & produced).sum()),
        "n_true_l": int(n_l),
        "rate_r_per_s": rates[0] * 1e6,
        "rate_s_per_s": rates[1] * 1e6,
        "max_delay_r_us": max_d[0],
        "max_delay_s_us": max_d[1],
        "samples": int(req_r.size + req_s.size),
        # the statement of feasibility: what Q_L needed, and the recall the bound allows
        "needed_us": int(needed_us),
        "reachable": 1.0 if bound is None else reachable_recall(req_r, req_s, w_r, w_s, bound),
    }
    if st.estimator == "robust":
        stats |= guards
    if regime is not None:
        stats["observed"] = observed  # distinct later tuples in the sample
        stats["regime_start_us"] = regime.start_us
        stats["held_for_us"] = 0 if regime.held_since_us is None else now - regime.held_since_us
    return Adaptation(at, now, q_l, d_r, d_s, est, stats)
