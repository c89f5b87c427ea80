"""Delay models that change with a tuple's event time or sender, and the draw of any model's delays.

- :class:`RegimeShift` -- regimes of the link in *event time* (seconds, not tuples): calm,
  congested and outage periods of random lengths, each with its own delays; an outage holds what
  is sent during it until it ends. The abrupt changes the adaptive operators must follow;
- :class:`SenderSkew` -- each sender's clock lags by its own constant: all of a sender's tuples look
  that much late to a stream whose progress the other senders set.

:func:`draw` gives the delays of any model (these and :mod:`outoforder.core.delay_models`') with
the event times where the process changes abruptly (a regime's or a burst's start): a causal
controller cannot foresee those, so a period after one may miss its target whatever the
controller does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from outoforder.core.delay_models import (
    BodyTail,
    Bursty,
    Empirical,
    Exponential,
    FloatArray,
    LogNormal,
    Pareto,
    check_prob,
)
from outoforder.core.time import US_PER_SECOND
from outoforder.errors import ConfigError


@dataclass(frozen=True)
class Regime:
    """One state of a link: its delays, how long it lasts, and how often it follows another.

    A regime lasts a uniform ``[min_s, max_s]`` seconds of event time. When one ends, the next is
    drawn among the *other* regimes in proportion to their ``weight``. With ``hold``, the link is
    down: a delayed tuple sent during the regime leaves when it ends, plus its own draw of
    ``delay`` (the queue drains), so the tuples of an outage arrive together and late.
    """

    name: str
    delay: Exponential | LogNormal | Pareto | BodyTail
    min_s: float
    max_s: float
    weight: float = 1.0
    hold: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.max_s or not math.isfinite(self.max_s):
            msg = f"regime {self.name!r}: need 0 < min_s ({self.min_s}) <= max_s ({self.max_s})"
            raise ConfigError(msg)
        if not self.weight > 0:
            msg = f"regime {self.name!r}: weight must be > 0, got {self.weight}"
            raise ConfigError(msg)

    @property
    def mean_s(self) -> float:
        """Mean duration."""
        return (self.min_s + self.max_s) / 2


@dataclass(frozen=True)
class RegimeShift:
    """Delays from the regime the link is in at each tuple's event time (:class:`Regime`).

    The schedule starts in the first regime at the first event time and is drawn from the same
    ``rng`` as the delays, so a seed fixes both. :meth:`sample` (tuple counts only) places the
    tuples ``rate_per_s`` apart; :meth:`sample_at` uses the real event times, as the injector does.

    >>> calm = Regime("calm", Exponential(0.01, 0.5), 20, 90)
    >>> down = Regime("outage", Exponential(0.05, 0.9), 2, 5, hold=True)
    >>> m = RegimeShift((calm, down))
    >>> rng = np.random.default_rng(0)
    >>> starts, which = m.schedule(rng, 0.0, 600.0)
    >>> [m.regimes[i].name for i in which[:4]]
    ['calm', 'outage', 'calm', 'outage']
    >>> d = m.sample_at(np.random.default_rng(1), np.arange(0, 600, 0.01))
    >>> bool(d.max() > 1.0 > np.median(d))  # outages hold tuples for seconds; most are fast
    True
    """

    regimes: tuple[Regime, ...]
    rate_per_s: float = 10_800.0

    def __post_init__(self) -> None:
        if len(self.regimes) < 2:
            msg = "a regime shift needs at least two regimes"
            raise ConfigError(msg)
        if len({r.name for r in self.regimes}) < len(self.regimes):
            msg = f"regime names repeat: {[r.name for r in self.regimes]}"
            raise ConfigError(msg)
        if not self.rate_per_s > 0:
            msg = f"rate_per_s must be > 0, got {self.rate_per_s}"
            raise ConfigError(msg)

    def time_shares(self) -> list[float]:
        """Long-run share of time in each regime (a two-regime chain alternates: mean durations)."""
        # Jumps go to another regime by weight: the embedded chain's stationary law is solved,
        # then weighted by the mean durations.
        k = len(self.regimes)
        w = np.array([r.weight for r in self.regimes])
        jump = np.array([[0.0 if i == j else w[j] for j in range(k)] for i in range(k)])
        jump /= jump.sum(axis=1, keepdims=True)
        vals, vecs = np.linalg.eig(jump.T)
        pi = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
        pi = pi / pi.sum()
        t = pi * np.array([r.mean_s for r in self.regimes])
        return [float(x) for x in t / t.sum()]

    @property
    def late_prob(self) -> float:
        """Long-run probability that a tuple is delayed (time-weighted)."""
        return sum(s * r.delay.late_prob for s, r in zip(self.time_shares(), self.regimes, strict=True))

    def schedule(
        self, rng: np.random.Generator, t0_s: float, t1_s: float
    ) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        """Start times (seconds) and regime indices covering ``[t0_s, t1_s]``."""
        w = np.array([r.weight for r in self.regimes])
        starts, which = [t0_s], [0]
        t = t0_s
        while True:
            r = self.regimes[which[-1]]
            t += float(rng.uniform(r.min_s, r.max_s))
            if t > t1_s:
                break
            p = w.copy()
            p[which[-1]] = 0.0
            starts.append(t)
            which.append(int(rng.choice(len(w), p=p / p.sum())))
        return np.array(starts), np.array(which, dtype=np.int64)

    def regime_at(self, starts: FloatArray, event_s: FloatArray) -> npt.NDArray[np.int64]:
        """Index into the schedule (``starts``) of each event time."""
        return np.searchsorted(starts, event_s, side="right").astype(np.int64) - 1

    def sample_at(self, rng: np.random.Generator, event_s: FloatArray) -> FloatArray:
        """Delays (seconds) of tuples with these event times (seconds, any order)."""
        return self.sample_schedule(rng, event_s)[0]

    def sample_schedule(self, rng: np.random.Generator, event_s: FloatArray) -> tuple[FloatArray, FloatArray]:
        """:meth:`sample_at`'s delays and the start times (seconds) of the regimes after the first."""
        event_s = np.asarray(event_s, dtype=np.float64)
        if event_s.size == 0:
            return np.zeros(0), np.zeros(0)
        starts, which = self.schedule(rng, float(event_s.min()), float(event_s.max()))
        slot = self.regime_at(starts, event_s)
        ends = np.append(starts[1:], np.inf)
        out = np.zeros(event_s.size)
        for i, r in enumerate(self.regimes):
            mine = which[slot] == i
            d = r.delay.sample(rng, int(mine.sum()))
            if r.hold:  # a delayed tuple waits for the link; the last outage has no end: not held
                end = ends[slot[mine]]
                wait = np.where(np.isfinite(end) & (d > 0), end - event_s[mine], 0.0)
                d = d + wait
            out[mine] = d
        return out, starts[1:]

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays of tuples ``1 / rate_per_s`` apart."""
        return self.sample_at(rng, np.arange(n) / self.rate_per_s)

    def expected_max_s(self, n_late: int) -> float:
        """Typical maximum: the heaviest regime's, an outage's plus its longest hold."""
        shares = self.time_shares()
        out = 0.0
        for s, r in zip(shares, self.regimes, strict=True):
            m = r.delay.expected_max_s(max(1, round(n_late * s)))
            out = max(out, m + (r.max_s if r.hold else 0.0))
        return out

    def describe(self) -> str:
        """Model name and its regimes."""
        parts = ", ".join(
            f"{r.name}={r.delay.describe()} for {r.min_s:g}-{r.max_s:g}s w={r.weight:g}" + (" held" * r.hold)
            for r in self.regimes
        )
        return f"regime_shift({parts})"


@dataclass(frozen=True)
class SenderSkew:
    """Each sender's clock lags by its own constant; on top, every tuple draws ``base``'s delay.

    A sender whose clock is ``s`` behind stamps its tuples ``s`` early, so they look ``s`` late
    to a stream whose progress the other senders set: to the operators, skew is a constant delay
    per sender. A share ``skewed_share`` of the senders lag, each by a uniform draw from
    ``[0, max_skew_s]`` (drawn once per sender, in the order of their ids).

    >>> m = SenderSkew(Exponential(0.01, 0.0), max_skew_s=2.0)
    >>> d = m.sample_senders(np.random.default_rng(0), np.array([0, 1, 0, 1]))
    >>> bool(d[0] == d[2] and d[1] == d[3] and 0 <= d.min() and d.max() <= 2)
    True
    """

    base: Exponential | LogNormal | Pareto | BodyTail
    max_skew_s: float
    skewed_share: float = 1.0

    def __post_init__(self) -> None:
        check_prob(self.skewed_share, "skewed_share")
        if not self.max_skew_s >= 0 or not math.isfinite(self.max_skew_s):
            msg = f"max_skew_s must be finite and >= 0, got {self.max_skew_s}"
            raise ConfigError(msg)

    @property
    def late_prob(self) -> float:
        """The base model's (a skewed sender's tuples are late by its skew even when on time)."""
        return self.base.late_prob

    def sample_senders(self, rng: np.random.Generator, senders: npt.NDArray[np.int64]) -> FloatArray:
        """Delays of tuples from these senders (ids >= 0)."""
        senders = np.asarray(senders, dtype=np.int64)
        if senders.size == 0:
            return np.zeros(0)
        k = int(senders.max()) + 1
        skew = np.where(rng.random(k) < self.skewed_share, rng.uniform(0.0, self.max_skew_s, k), 0.0)
        return self.base.sample(rng, senders.size) + skew[senders]

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays of one sender."""
        return self.sample_senders(rng, np.zeros(n, np.int64))

    def expected_max_s(self, n_late: int) -> float:
        """The base model's typical maximum plus the largest skew."""
        return self.base.expected_max_s(n_late) + self.max_skew_s

    def describe(self) -> str:
        """Model name and parameters."""
        return (
            f"sender_skew(base={self.base.describe()}, max_skew={self.max_skew_s:g}s, "
            f"skewed_share={self.skewed_share:g})"
        )


AnyDelayModel = Exponential | LogNormal | Pareto | Bursty | BodyTail | Empirical | RegimeShift | SenderSkew


@dataclass(frozen=True)
class Draw:
    """Delays (seconds, input order) and where the delay process changed abruptly (event µs)."""

    delay_s: FloatArray
    shifts_us: npt.NDArray[np.int64]


def draw(
    model: AnyDelayModel,
    rng: np.random.Generator,
    event_us: npt.NDArray[np.int64],
    senders: Sequence[int] | npt.NDArray[np.int64] | None = None,
) -> Draw:
    """Delays of tuples with these event times (and senders), and the model's abrupt shifts.

    A regime schedule runs on the tuples' event times; bursts run over the tuples in input
    order; skews need the senders (without them, all tuples are one sender's). The draws are
    the models' own ``sample`` draws, so a seed gives the same delays either way.

    >>> m = RegimeShift((Regime("a", Exponential(0.01), 10, 10), Regime("b", Exponential(1.0), 10, 10)))
    >>> d = draw(m, np.random.default_rng(0), np.arange(0, 30_000_000, 1_000_000))
    >>> d.shifts_us.tolist()
    [10000000, 20000000]
    """
    ts = np.asarray(event_us, dtype=np.int64)
    none = np.zeros(0, np.int64)
    if isinstance(model, RegimeShift):
        delays, starts = model.sample_schedule(rng, ts / US_PER_SECOND)
        return Draw(delays, np.rint(starts * US_PER_SECOND).astype(np.int64))
    if isinstance(model, Bursty):
        delays, at = model.sample_runs(rng, ts.size)
        return Draw(delays, np.sort(ts[at]))
    if isinstance(model, SenderSkew) and senders is not None:
        return Draw(model.sample_senders(rng, np.asarray(senders, dtype=np.int64)), none)
    return Draw(model.sample(rng, ts.size), none)
