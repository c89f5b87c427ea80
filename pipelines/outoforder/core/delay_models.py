"""Seeded delay models that turn an ordered stream into an out-of-order arrival sequence.

A tuple with event time ``ts`` and sampled delay ``D`` arrives at ``ts + D``; arrival order is the
order of arrival times (ties broken by event order). Every model is *zero-inflated*: a tuple is
delayed with probability ``late_prob`` and otherwise arrives at its event time, because in the
papers' data most disorder comes from a fraction of tuples (57-83 % late in DEBS 2013 with a mean
delay of 30-64 ms but maxima of 14-171 s: a heavy tail, not a uniform jitter).

Models (all delays in seconds):

- :class:`Exponential` -- the top-k paper's synthetic data ("network delay follows an exponential
  distribution");
- :class:`LogNormal` -- fitted to a mean *and* a maximum, so one family reproduces both the 34 ms mean
  and the 142 s maximum of QJoin's D1;
- :class:`Pareto` -- a power-law tail (``xm``, ``alpha``);
- :class:`Bursty` -- regime switching: calm and burst periods alternate (geometric run lengths in
  tuples) with different late probabilities, so late tuples cluster in time as on a congested link;
- :class:`BodyTail` -- a body for most delayed tuples and a rare or slow minority (a Pareto tail as
  in the DEBS presets, or a second mode: most delays a fraction of a second, a tenth tens of seconds);
- :class:`Empirical` -- trace-driven: delays drawn from measured ones (e.g. the OoO-Dataset's real
  UMTS transmission delays, :func:`outoforder.sources.disorder.ooo_trace_delays`);
- :class:`RegimeShift` -- regimes of the link in *event time* (seconds, not tuples): calm,
  congested and outage periods of random lengths, each with its own delays; an outage holds what
  is sent during it until it ends. The abrupt changes the adaptive operators must follow;
- :class:`SenderSkew` -- each sender's clock lags by its own constant: all of a sender's tuples look
  that much late to a stream whose progress the other senders set.

:func:`draw` gives the delays with the event times where the process changes abruptly (a
regime's or a burst's start): a causal controller cannot foresee those, so a period after one
may miss its target whatever the controller does.

>>> import numpy as np
>>> m = Exponential(mean_s=0.5, late_prob=1.0)
>>> d = m.sample(np.random.default_rng(1), 100_000)
>>> round(float(d.mean()), 2)
0.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol

import numpy as np
import numpy.typing as npt

from outoforder.core.time import US_PER_SECOND
from outoforder.errors import ConfigError

FloatArray = npt.NDArray[np.float64]


class DelayModel(Protocol):
    """A seeded sampler of per-tuple delays in seconds (0 = on time)."""

    late_prob: float

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Return ``n`` delays (seconds, >= 0) drawn with ``rng``."""
        ...

    def expected_max_s(self, n_late: int) -> float:
        """The typical largest of ``n_late`` delayed tuples (the median of the maximum)."""
        ...

    def describe(self) -> str:
        """One line naming the model and its parameters."""
        ...


def _check_prob(p: float, name: str) -> None:
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        msg = f"{name} must be a probability in [0, 1], got {p}"
        raise ConfigError(msg)


def _zero_inflate(rng: np.random.Generator, n: int, late_prob: float, draw: FloatArray) -> FloatArray:
    mask = rng.random(n) < late_prob
    return np.where(mask, draw, 0.0)


def _median_max_quantile(n: int) -> float:
    # The median of the maximum of n iid draws sits at quantile 0.5 ** (1 / n).
    return float(0.5 ** (1.0 / max(n, 1)))


@dataclass(frozen=True)
class Exponential:
    """Delays ~ Exp(mean ``mean_s``) with probability ``late_prob``."""

    mean_s: float
    late_prob: float = 1.0

    def __post_init__(self) -> None:
        _check_prob(self.late_prob, "late_prob")
        if not self.mean_s > 0:
            msg = f"exponential mean must be > 0, got {self.mean_s}"
            raise ConfigError(msg)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays."""
        return _zero_inflate(rng, n, self.late_prob, rng.exponential(self.mean_s, n))

    def expected_max_s(self, n_late: int) -> float:
        """Median of the maximum of ``n_late`` exponential draws."""
        return -self.mean_s * math.log(1.0 - _median_max_quantile(n_late))

    def describe(self) -> str:
        """Model name and parameters."""
        return f"exponential(mean={self.mean_s:g}s, late_prob={self.late_prob:g})"


@dataclass(frozen=True)
class LogNormal:
    """Delays ~ LogNormal(mu, sigma) (of seconds) with probability ``late_prob``."""

    mu: float
    sigma: float
    late_prob: float = 1.0

    def __post_init__(self) -> None:
        _check_prob(self.late_prob, "late_prob")
        if not self.sigma > 0:
            msg = f"lognormal sigma must be > 0, got {self.sigma}"
            raise ConfigError(msg)

    @classmethod
    def fit(cls, mean_s: float, max_s: float, n_late: int, late_prob: float) -> LogNormal:
        """Parameters whose mean is ``mean_s`` and whose typical max over ``n_late`` draws is ``max_s``.

        Solves ``mu + sigma^2/2 = ln(mean)`` and ``mu + z*sigma = ln(max)`` (z = the normal
        quantile of the median maximum): ``sigma^2 - 2 z sigma + 2 ln(max/mean) = 0``, smaller root.
        """
        if not 0 < mean_s < max_s:
            msg = f"need 0 < mean ({mean_s}) < max ({max_s})"
            raise ConfigError(msg)
        z = NormalDist().inv_cdf(_median_max_quantile(n_late))
        c = 2.0 * math.log(max_s / mean_s)
        disc = z * z - c
        if disc < 0:
            msg = f"no lognormal has mean {mean_s}s and max {max_s}s over {n_late} draws"
            raise ConfigError(msg)
        sigma = z - math.sqrt(disc)
        return cls(mu=math.log(mean_s) - sigma * sigma / 2.0, sigma=sigma, late_prob=late_prob)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays."""
        return _zero_inflate(rng, n, self.late_prob, rng.lognormal(self.mu, self.sigma, n))

    def expected_max_s(self, n_late: int) -> float:
        """Median of the maximum of ``n_late`` lognormal draws."""
        z = NormalDist().inv_cdf(_median_max_quantile(n_late))
        return math.exp(self.mu + z * self.sigma)

    def describe(self) -> str:
        """Model name and parameters."""
        return f"lognormal(mu={self.mu:.4g}, sigma={self.sigma:.4g}, late_prob={self.late_prob:g})"


@dataclass(frozen=True)
class Pareto:
    """Delays ~ Pareto(scale ``xm_s``, shape ``alpha``): P[D > x] = (xm/x)^alpha for x >= xm."""

    xm_s: float
    alpha: float
    late_prob: float = 1.0

    def __post_init__(self) -> None:
        _check_prob(self.late_prob, "late_prob")
        if not (self.xm_s > 0 and self.alpha > 0):
            msg = f"pareto needs xm > 0 and alpha > 0, got xm={self.xm_s}, alpha={self.alpha}"
            raise ConfigError(msg)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays (inverse-CDF sampling)."""
        u = 1.0 - rng.random(n)  # in (0, 1]
        return _zero_inflate(rng, n, self.late_prob, self.xm_s * u ** (-1.0 / self.alpha))

    def expected_max_s(self, n_late: int) -> float:
        """Median of the maximum of ``n_late`` Pareto draws."""
        return float(self.xm_s * (1.0 - _median_max_quantile(n_late)) ** (-1.0 / self.alpha))

    def describe(self) -> str:
        """Model name and parameters."""
        return f"pareto(xm={self.xm_s:g}s, alpha={self.alpha:g}, late_prob={self.late_prob:g})"


@dataclass(frozen=True)
class Bursty:
    """Regime switching: calm and burst runs alternate; each regime has its own delay model.

    Run lengths (in tuples) are geometric with means ``calm_tuples`` and ``burst_tuples``; the
    stream starts calm. ``late_prob`` is the long-run share of delayed tuples (for reports).
    """

    calm: Exponential | LogNormal | Pareto
    burst: Exponential | LogNormal | Pareto
    calm_tuples: float = 20_000.0
    burst_tuples: float = 2_000.0

    def __post_init__(self) -> None:
        if self.calm_tuples < 1 or self.burst_tuples < 1:
            msg = "bursty regimes must last at least one tuple on average"
            raise ConfigError(msg)

    @property
    def burst_share(self) -> float:
        """Long-run fraction of tuples in the burst regime."""
        return self.burst_tuples / (self.calm_tuples + self.burst_tuples)

    @property
    def late_prob(self) -> float:
        """Long-run probability that a tuple is delayed."""
        b = self.burst_share
        return (1 - b) * self.calm.late_prob + b * self.burst.late_prob

    def regimes(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.bool_]:
        """True where a tuple falls in a burst."""
        in_burst = np.zeros(n, dtype=bool)
        pos, burst = 0, False
        while pos < n:
            mean = self.burst_tuples if burst else self.calm_tuples
            run = int(rng.geometric(1.0 / mean))
            if burst:
                in_burst[pos : pos + run] = True
            pos += run
            burst = not burst
        return in_burst

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays, regime by regime."""
        return self.sample_runs(rng, n)[0]

    def sample_runs(self, rng: np.random.Generator, n: int) -> tuple[FloatArray, npt.NDArray[np.int64]]:
        """:meth:`sample`'s delays and the indices where a run (calm or burst) begins after the first."""
        in_burst = self.regimes(rng, n)
        calm = self.calm.sample(rng, n)
        burst = self.burst.sample(rng, n)
        return np.where(in_burst, burst, calm), np.flatnonzero(np.diff(in_burst.astype(np.int8))) + 1

    def expected_max_s(self, n_late: int) -> float:
        """Typical maximum, dominated by whichever regime has the heavier tail."""
        lp = self.late_prob or 1.0
        b = self.burst_share
        n_calm = max(1, round(n_late * (1 - b) * self.calm.late_prob / lp))
        n_burst = max(1, round(n_late * b * self.burst.late_prob / lp))
        return max(self.calm.expected_max_s(n_calm), self.burst.expected_max_s(n_burst))

    def describe(self) -> str:
        """Model name and parameters."""
        return (
            f"bursty(calm={self.calm.describe()}, burst={self.burst.describe()}, "
            f"calm_tuples={self.calm_tuples:g}, burst_tuples={self.burst_tuples:g})"
        )


@dataclass(frozen=True)
class BodyTail:
    """A body distribution for most delayed tuples and a rare Pareto tail for the extreme ones.

    Real links are mostly fast with rare stalls: QJoin's D1 has a 34 ms mean but a 142 s maximum.
    One lognormal cannot give both the papers' late fraction and their maximum, so a share
    ``tail_share`` of the delayed tuples draws from ``tail`` instead of ``body``. With a tail of
    its own mode (a lognormal around tens of seconds) it is bimodal: a fleet whose senders mostly
    reach the server at once but sometimes buffer their reports through a dead zone.
    """

    body: Exponential | LogNormal
    tail: Exponential | LogNormal | Pareto
    tail_share: float
    late_prob: float = 1.0

    def __post_init__(self) -> None:
        _check_prob(self.tail_share, "tail_share")
        _check_prob(self.late_prob, "late_prob")

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays."""
        body = self.body.sample(rng, n)  # body/tail late_prob are 1 by design
        tail = self.tail.sample(rng, n)
        draw = np.where(rng.random(n) < self.tail_share, tail, body)
        return _zero_inflate(rng, n, self.late_prob, draw)

    def expected_max_s(self, n_late: int) -> float:
        """Typical maximum: the tail's over its share of draws, or the body's if larger."""
        n_tail = max(1, round(n_late * self.tail_share))
        return max(self.body.expected_max_s(n_late), self.tail.expected_max_s(n_tail))

    def describe(self) -> str:
        """Model name and parameters."""
        return (
            f"body_tail(body={self.body.describe()}, tail={self.tail.describe()}, "
            f"tail_share={self.tail_share:g}, late_prob={self.late_prob:g})"
        )


@dataclass(frozen=True)
class Empirical:
    """Delays resampled (with replacement) from a measured trace, e.g. real network delays.

    ``late_prob`` = 1 by default: a trace of transmission delays already holds its own on-time
    share (a delay of 0 s is rare on a real link, but equal delays keep order just the same).

    >>> m = Empirical((0.1, 0.2, 0.3), name="toy")
    >>> sorted(set(m.sample(np.random.default_rng(0), 50).tolist()))
    [0.1, 0.2, 0.3]
    >>> m.describe()
    'empirical(toy: 3 delays, mean=0.2s, max=0.3s, late_prob=1)'
    """

    delays_s: tuple[float, ...]
    name: str = "trace"
    late_prob: float = 1.0

    def __post_init__(self) -> None:
        _check_prob(self.late_prob, "late_prob")
        arr = np.asarray(self.delays_s, dtype=np.float64)
        if arr.size == 0 or not np.isfinite(arr).all() or (arr < 0).any():
            msg = f"a delay trace needs finite delays >= 0 (got {arr.size} values)"
            raise ConfigError(msg)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Draw ``n`` delays from the trace."""
        arr = np.asarray(self.delays_s, dtype=np.float64)
        return _zero_inflate(rng, n, self.late_prob, arr[rng.integers(0, arr.size, n)])

    def expected_max_s(self, n_late: int) -> float:
        """The empirical quantile at the median of the maximum (capped by the trace's maximum)."""
        return float(
            np.quantile(np.asarray(self.delays_s), _median_max_quantile(n_late), method="inverted_cdf")
        )

    def describe(self) -> str:
        """Model name and the trace's size, mean and maximum."""
        arr = np.asarray(self.delays_s)
        return (
            f"empirical({self.name}: {arr.size} delays, mean={arr.mean():.3g}s, max={arr.max():.3g}s, "
            f"late_prob={self.late_prob:g})"
        )


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
        _check_prob(self.skewed_share, "skewed_share")
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
