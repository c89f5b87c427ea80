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

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    """One adaptation: the new K_min and interval, the candidates' mean accuracies, the move.

    The lateness controller also states what the target needs (``needed_us``: the K that would
    meet it, unbounded) and the best accuracy reachable under the user's bound (``reachable``), so
    an infeasible target is said, not just missed.
    """

    k_min_us: float
    k_down_us: float
    k_up_us: float
    accuracies: list[float]
    move: str  # "narrow" | "down" | "up" (lateness controller: "up" | "down" | "hold")
    needed_us: float | None = None
    reachable: float | None = None

    @property
    def feasible(self) -> bool | None:
        """Whether the target is reachable under the bound (None: the seed's controller cannot tell)."""
        return None if self.needed_us is None else self.needed_us <= self.k_min_us


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

    def observe(self, hits: Sequence[float], lateness: Sequence[float] = ()) -> Decision | None:
        """One query's hit rate per candidate; a :class:`Decision` after every n-th query.

        ``lateness`` (the true top-k's, see :class:`LatenessController`) is not used by the seed.
        """
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

    def provisional(self, profiles: Sequence[Sequence[float]]) -> Decision | None:
        """The seed decides on scored windows only."""
        return None

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume (JSON-able)."""
        return {"k_down_us": self.k_down_us, "k_up_us": self.k_up_us, "pending": self.pending}

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a controller with the same settings."""
        try:
            k_down, k_up = float(snap["k_down_us"]), float(snap["k_up_us"])
            self.pending = [list(p) for p in snap["pending"]]
            self.k_down_us, self.k_up_us = k_down, k_up
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a cache-duration snapshot: {snap!r}"
            raise StateError(msg) from e


# --- The lateness controller (this project's; the seed's controller above is kept as the baseline) ---


def accuracy_at(profiles: Iterable[Sequence[float]], cache_us: float) -> float:
    """The mean hit rate a cache of ``cache_us`` has on windows with these lateness profiles.

    A window's profile is the lateness of each member of its true top-k: the stream's progress
    when the member arrived minus the window's end. The member is in the list emitted at
    ``end + K`` exactly when it arrived before, i.e. when its lateness is below K (a true top-k
    tuple that has arrived is in the top-k of what has arrived). Windows with no member are left out.

    >>> accuracy_at([[-5, 0, 40], [10]], 20)
    0.8333333333333333
    """
    rates = [sum(x < cache_us for x in p) / len(p) for p in profiles if p]
    return sum(rates) / len(rates) if rates else 1.0


def needed_cache(profiles: Iterable[Sequence[float]], target: float) -> float:
    """The smallest cache duration (µs, >= 0) whose :func:`accuracy_at` on ``profiles`` is >= ``target``.

    Each member weighs 1 / (its window's size × the number of windows); the answer is just above
    the lateness at which the weights, in ascending lateness, first add up to the target.

    >>> needed_cache([[-5, 0, 40], [10]], 0.5), needed_cache([[-5, 0, 40], [10]], 1.0)
    (11.0, 41.0)
    >>> needed_cache([], 0.95)
    0.0
    """
    windows = [p for p in profiles if p]
    if not windows:
        return 0.0
    members = sorted((float(x), 1.0 / (len(p) * len(windows))) for p in windows for x in p)
    total = 0.0
    for late, weight in members:
        total += weight
        if total >= target - 1e-12:
            return max(0.0, late + 1.0)
    return max(0.0, members[-1][0] + 1.0)


@dataclass(frozen=True)
class LatenessSettings:
    """K initial, n windows of evidence, ε_min, the user's bound on K (µs), the headroom.

    The controller aims at ``ε_min + headroom · (1 − ε_min)``: aiming at ε_min exactly meets it
    on about half of the stretches (the estimate from n windows is noisy), the headroom keeps the
    mean above it. ``bound_us`` is the user's latency bound: K never exceeds it, and when the
    target needs more the decisions say so (``Decision.needed_us``, ``Decision.reachable``).
    """

    initial_us: float = 2_000_000.0
    n: int = 30
    eps_min: float = 0.95
    bound_us: float = math.inf
    headroom: float = 0.5

    def __post_init__(self) -> None:
        if not (self.initial_us >= 0 and self.n >= 1 and 0 < self.eps_min <= 1):
            msg = f"need K >= 0, n >= 1 and 0 < ε_min <= 1; got {self}"
            raise ConfigError(msg)
        if not (self.bound_us >= 0 and 0 <= self.headroom < 1):
            msg = f"need a bound >= 0 and a headroom in [0, 1); got {self.bound_us}, {self.headroom}"
            raise ConfigError(msg)

    @property
    def target(self) -> float:
        """The accuracy aimed at."""
        return self.eps_min + self.headroom * (1.0 - self.eps_min)


@dataclass
class LatenessController:
    """The cache duration the target needs, read off the lateness of the true top-k members.

    The seed's controller can only compare the m durations below ``K_up``: when none meets ε_min it
    moves up one step per n windows, which never reaches the taxi trips' ~2,200 s, and it cannot
    tell a target out of reach from one not reached yet. But a window's hit rate at *any* K follows
    from when its true top-k members arrived (:func:`accuracy_at`), so this controller keeps those
    lateness profiles and sets K to what the target needs (:func:`needed_cache`), from two sources:

    - the last ``n`` *settled* windows (their late tuples awaited: exact, but a horizon old);
    - the windows emitted and not yet settled, with the members known so far
      (:meth:`provisional`). Later members can only add misses, so this is a lower bound of what
      they need: when a burst of late tuples comes, K rises as soon as the misses arrive, without
      waiting for a settlement; it comes back down once the burst's windows have settled.

    K is the larger of the two, capped at the user's bound. Each change is a :class:`Decision`
    stating the K needed (unbounded) and the accuracy reachable at the bound on the settled
    windows (and, if lower, on the unsettled ones so far); so is every n-th settled window
    without a change (move ``"hold"``), so that the statement stays current while K sits at
    the bound.

    >>> c = LatenessController(LatenessSettings(initial_us=0, n=2, eps_min=0.9, headroom=0, bound_us=50))
    >>> d = c.observe([1.0], [-3, 0, 20, 30, 40])   # 3 members late by 20-40 µs: K 41 meets 0.9
    >>> d.k_min_us, d.needed_us, d.feasible
    (41.0, 41.0, True)
    >>> d = c.observe([0.0], [100, 120])             # a window needing 121 µs: beyond the bound
    >>> d.k_min_us, d.needed_us, d.feasible, d.reachable
    (50.0, 121.0, False, 0.5)
    """

    settings: LatenessSettings
    k_min_us: float = -1.0  # set from the settings
    settled: deque[list[float]] = field(default_factory=deque)
    k_now_us: float = 0.0  # what the unsettled windows need so far (a lower bound)
    reach_now: float = 1.0  # their accuracy at the bound so far (an upper bound)
    since: int = 0  # windows settled since the last decision

    def __post_init__(self) -> None:
        if self.k_min_us < 0:
            self.k_min_us = min(float(self.settings.initial_us), float(self.settings.bound_us))
        self.settled = deque(self.settled, maxlen=self.settings.n)

    def candidates(self) -> list[float]:
        """One list is recorded per window: the one emitted at K."""
        return [self.k_min_us]

    def observe(self, hits: Sequence[float], lateness: Sequence[float] = ()) -> Decision | None:
        """A settled window: its members' lateness joins the evidence; a Decision if K changes."""
        del hits  # the hit rate at any K follows from the lateness
        self.settled.append([float(x) for x in lateness])
        self.since += 1
        return self._decide(hold=self.since >= self.settings.n)

    def provisional(self, profiles: Sequence[Sequence[float]]) -> Decision | None:
        """The emitted, unsettled windows' profiles so far; a Decision if K changes."""
        self.k_now_us = needed_cache(profiles, self.settings.target)
        self.reach_now = accuracy_at(profiles, float(self.settings.bound_us))
        return self._decide()

    def _decide(self, hold: bool = False) -> Decision | None:
        st = self.settings
        base = needed_cache(self.settled, st.target) if self.settled else float(st.initial_us)
        needed = max(base, self.k_now_us)
        k = min(needed, float(st.bound_us))
        if k == self.k_min_us and not hold:
            return None
        move = "hold" if k == self.k_min_us else "up" if k > self.k_min_us else "down"
        self.k_min_us, self.since = k, 0
        acc = round(accuracy_at(self.settled, k), 6)
        # the lower of what the two sources allow: the one that needs more than the bound says so
        reach = round(min(accuracy_at(self.settled, st.bound_us), self.reach_now), 6)
        return Decision(k, k, k, [acc], move, needed, reach)

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume (JSON-able)."""
        return {
            "k_min_us": self.k_min_us,
            "settled": list(self.settled),
            "k_now_us": self.k_now_us,
            "reach_now": self.reach_now,
            "since": self.since,
        }

    def restore(self, snap: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a controller with the same settings."""
        try:
            settled = deque(([float(x) for x in p] for p in snap["settled"]), maxlen=self.settings.n)
            k, now, since = float(snap["k_min_us"]), float(snap["k_now_us"]), int(snap["since"])
            reach = float(snap["reach_now"])
            self.k_min_us, self.settled, self.k_now_us, self.reach_now, self.since = (
                k,
                settled,
                now,
                reach,
                since,
            )
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a lateness-controller snapshot: {snap!r}"
            raise StateError(msg) from e


class CachePolicy(Protocol):
    """Where the cache duration comes from."""

    @property
    def k_min_us(self) -> float:
        """The cache duration in force."""
        ...

    def candidates(self) -> list[float]:
        """The durations to record lists for (ascending, the last one ``k_min_us``)."""
        ...

    def observe(self, hits: list[float], lateness: list[float]) -> Decision | None:
        """A settled window: its hit rate per candidate, and its true top-k members' lateness."""
        ...

    def provisional(self, profiles: list[list[float]]) -> Decision | None:
        """The lateness profiles of the windows emitted and not yet settled, as known so far."""
        ...


@dataclass
class FixedCache:
    """A constant cache duration (no candidates to score)."""

    cache_us: float

    @property
    def k_min_us(self) -> float:
        """The duration in force."""
        return self.cache_us

    def candidates(self) -> list[float]:
        """No candidates: nothing is recorded for a controller."""
        return []

    def observe(self, hits: list[float], lateness: list[float]) -> Decision | None:
        """Nothing to adapt."""
        return None

    def provisional(self, profiles: list[list[float]]) -> Decision | None:
        """Nothing to adapt."""
        return None
