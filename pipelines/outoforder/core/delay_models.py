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

The models built on these, whose delays depend on when or by whom a tuple was sent (regimes of the
link in event time, senders' clock skew), and :func:`~outoforder.core.delay_regimes.draw`, which
draws any model's delays, are in :mod:`outoforder.core.delay_regimes`.

>>> import numpy as np
>>> m = Exponential(mean_s=0.5, late_prob=1.0)
>>> d = m.sample(np.random.default_rng(1), 100_000)
>>> round(float(d.mean()), 2)
0.5
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol

import numpy as np
import numpy.typing as npt

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


def check_prob(p: float, name: str) -> None:
    """Fail unless ``p`` is a probability (a model argument named ``name``)."""
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
        check_prob(self.late_prob, "late_prob")
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
        check_prob(self.late_prob, "late_prob")
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
        check_prob(self.late_prob, "late_prob")
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
        check_prob(self.tail_share, "tail_share")
        check_prob(self.late_prob, "late_prob")

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
        check_prob(self.late_prob, "late_prob")
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
