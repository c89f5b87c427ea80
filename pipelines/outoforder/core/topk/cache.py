"""The adaptive cache duration of the out-of-order top-k query (Wu & Fang 2021, §2.1; docs/topk.md).

The user states the lowest acceptable accuracy ``ε_min``. The controller keeps a candidate
interval ``(K_down, K_up]``, initially ``(0, K]``, cut into ``m`` durations
``K_down + i·(K_up − K_down)/m`` (i = 1 … m). For each of ``n`` queries it is told the hit rate each
candidate duration would have had (against the true top-k, known once every late tuple is in);
then, on the candidates' mean accuracy:

- the smallest candidate meeting ``ε_min`` is ``K_i``: the next interval is ``(K_{i−1}, K_i]`` and
  ``K_min = K_i`` (the seed's example: (0, 4.5], m = 3, accuracies 72/83/94 %, ε_min 0.8 → the
  next interval is (1.5, 3] and K_min = 3 s);
- if even the first candidate meets ``ε_min``: with ``K_down = 0`` the answer is in ``(0, K_1]``,
  the next interval; otherwise it may lie below ``K_down`` and the interval moves down one step
  (not below 0). If none meets it, the interval moves up one step;
- the step ``(K_up − K_down)/m`` never falls below ``min_step_us`` (the seed: "not too small, or it
  converges too slowly"): a narrower interval is widened downwards to ``m · min_step``.

The operator emits each window after ``K_min``, which always equals ``K_up``, so every candidate's
result is known by then. Moves down and up are this project's reading of "shift the interval by
one step"; the seed does not say which candidate the K_min of a moved interval is: we take the new
``K_up``.

>>> c = CacheDurationController(CacheSettings(initial_us=4_500_000, m=3, n=1, eps_min=0.8, min_step_us=1))
>>> c.candidates()
[1500000.0, 3000000.0, 4500000.0]
>>> d = c.observe([0.72, 0.83, 0.94])
>>> d.move, d.k_down_us, d.k_up_us, d.k_min_us
('narrow', 1500000.0, 3000000.0, 3000000.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from outoforder.errors import ConfigError, StateError


@dataclass(frozen=True)
class CacheSettings:
    """K initial, m candidates, n queries per decision, ε_min, the smallest step (µs)."""

    initial_us: float = 2_000_000.0
    m: int = 10
    n: int = 30
    eps_min: float = 0.95
    min_step_us: float = 10_000.0

    def __post_init__(self) -> None:
        if not (self.initial_us > 0 and self.m >= 1 and self.n >= 1 and 0 < self.eps_min <= 1):
            msg = f"need K > 0, m >= 1, n >= 1 and 0 < ε_min <= 1; got {self}"
            raise ConfigError(msg)
        if self.min_step_us <= 0:
            msg = f"the smallest step must be > 0 µs, got {self.min_step_us}"
            raise ConfigError(msg)


@dataclass(frozen=True)
class Decision:
    """One adaptation: the new K_min and interval, the candidates' mean accuracies, the move."""

    k_min_us: float
    k_down_us: float
    k_up_us: float
    accuracies: list[float]
    move: str  # "narrow" | "down" | "up"


@dataclass
class CacheDurationController:
    """State: the interval and the hit rates gathered since the last decision."""

    settings: CacheSettings
    k_down_us: float = 0.0
    k_up_us: float = -1.0  # set from the settings
    pending: list[list[float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.k_up_us < 0:
            self.k_up_us = float(self.settings.initial_us)

    @property
    def k_min_us(self) -> float:
        """The cache duration in force."""
        return self.k_up_us

    def candidates(self) -> list[float]:
        """The m candidate durations, ascending; the last is K_up."""
        step = (self.k_up_us - self.k_down_us) / self.settings.m
        return [self.k_down_us + i * step for i in range(1, self.settings.m)] + [float(self.k_up_us)]

    def observe(self, hits: Sequence[float]) -> Decision | None:
        """One query's hit rate per candidate; a :class:`Decision` after every n-th query."""
        if len(hits) != self.settings.m:
            msg = f"expected {self.settings.m} hit rates (one per candidate), got {len(hits)}"
            raise ConfigError(msg)
        self.pending.append([float(h) for h in hits])
        if len(self.pending) < self.settings.n:
            return None
        acc = [sum(col) / len(self.pending) for col in zip(*self.pending, strict=True)]
        self.pending = []
        cands = self.candidates()
        step = (self.k_up_us - self.k_down_us) / self.settings.m
        meets = [i for i, a in enumerate(acc) if a >= self.settings.eps_min]
        if not meets:
            move, lo, hi = "up", self.k_down_us + step, self.k_up_us + step
        elif meets[0] == 0 and self.k_down_us > 0:
            shift = min(step, self.k_down_us)
            move, lo, hi = "down", self.k_down_us - shift, self.k_up_us - shift
        else:  # the answer lies in (K_{i-1}, K_i] (K_0 = K_down)
            i = meets[0]
            move, lo, hi = "narrow", cands[i - 1] if i else self.k_down_us, cands[i]
        floor = self.settings.m * self.settings.min_step_us
        if hi - lo < floor:
            lo = max(0.0, hi - floor)
            hi = max(hi, lo + floor)
        self.k_down_us, self.k_up_us = lo, hi
        return Decision(self.k_min_us, lo, hi, [round(a, 6) for a in acc], move)

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume (JSON-able)."""
        return {"k_down_us": self.k_down_us, "k_up_us": self.k_up_us, "pending": self.pending}

    @classmethod
    def restore(cls, settings: CacheSettings, snap: dict[str, Any]) -> CacheDurationController:
        """The controller a :meth:`snapshot` was taken from."""
        try:
            return cls(
                settings, float(snap["k_down_us"]), float(snap["k_up_us"]), [list(p) for p in snap["pending"]]
            )
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a cache-duration snapshot: {snap!r}"
            raise StateError(msg) from e
