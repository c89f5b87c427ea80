"""How long a window waits: the buffer policies of HPM and its baselines (docs/operators.md).

Each policy is told every arrival's delay (``t_max − ts`` before it, 0 if on time) and, when a
window's coverage becomes known, that coverage and the coverage its target needs; it answers the
buffer ``K`` in force given ``k``, the largest delay seen so far.

- :class:`FixedSlack` -- K-slack with a constant K (Babu et al.);
- :class:`MaxDelaySlack` -- MP-K-slack: K = k, the largest delay seen (Mutschler & Philippsen 2013);
- :class:`HPMSlack` -- HPM: K = α·k, α set by a PD controller on the coverage error;
- :class:`RecentHPMSlack` -- HPM with k over the last arrivals only, so that K comes back down
  after an outage (ours);
- :class:`LatenessSlack` -- K is what the recent windows needed: the smallest constant K that
  would have given each its target coverage, read off its members' lateness; a quantile over the
  last windows, capped at the user's bound (ours; it follows a change of the delay process within
  one coverage horizon and comes back down once the burst's windows have left its memory);
- :class:`AQSlack` -- AQ-K-slack in the spirit of Ji et al. (2015): K is the delay quantile that
  would give the needed coverage, at level ``λ_thr + u`` over the most recent delays, with ``u`` a
  PD-controlled correction; the level is re-evaluated when a window's coverage is observed. (The
  seed only names AQ-K-slack; this is what we implemented.)

Policies are small mutable objects built from their settings; :meth:`snapshot` returns the state to
persist between micro-batches, and ``restore`` loads it into a policy built from the same settings.

>>> p = HPMSlack(PDController(lambda_thr=0.9, alpha_initial=0.5))
>>> p.slack(2_000)
1000
>>> p.observe_window(coverage=0.7, lambda_thr=0.9)
>>> p.slack(2_000)  # 0.5 + 0.2 * 0.2 = 0.54
1080
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from outoforder.core.control.pd import PDController, PDState
from outoforder.core.windows.lateness import need_at
from outoforder.errors import ConfigError


class SlackPolicy(Protocol):
    """What the buffered window operator asks of a policy.

    ``follows_unsettled``: whether :meth:`observe_unsettled` is worth calling (the operator then
    works out, after every arrival that changed them, what the closed windows need so far).
    """

    name: str
    follows_unsettled: ClassVar[bool]

    def observe_delay(self, delay_us: int) -> None:
        """Every arrival's delay, in arrival order."""

    def observe_window(self, coverage: float, lambda_thr: float, needed_us: int = 0) -> None:
        """A closed window's observed coverage, the coverage its target needs, and the K it needed.

        ``needed_us`` is the smallest constant K under which the window would have reached
        ``lambda_thr`` (:mod:`outoforder.core.windows.lateness`).
        """

    def observe_unsettled(self, needed_us: Sequence[int]) -> None:
        """What each closed window not yet observed needs so far (replaces the previous list)."""

    def slack(self, max_delay_us: int) -> int:
        """K in force now, given the largest delay seen so far."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The state to persist (JSON-serialisable)."""
        ...

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` of a policy with the same settings."""
        ...


@dataclass
class FixedSlack:
    """K-slack: K never changes."""

    k_us: int
    name: str = "kslack"
    follows_unsettled: ClassVar[bool] = False

    def observe_delay(self, delay_us: int) -> None:
        """Ignored."""

    def observe_window(self, coverage: float, lambda_thr: float, needed_us: int = 0) -> None:
        """Ignored."""

    def observe_unsettled(self, needed_us: Sequence[int]) -> None:
        """Ignored."""

    def slack(self, max_delay_us: int) -> int:
        """See :class:`SlackPolicy`."""
        return self.k_us

    def snapshot(self) -> dict[str, Any]:
        """See :class:`SlackPolicy`."""
        return {"policy": self.name, "k_us": self.k_us}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Nothing changes: K is a setting."""


@dataclass
class MaxDelaySlack:
    """MP-K-slack: wait as long as the largest delay seen so far."""

    name: str = "mp-kslack"
    follows_unsettled: ClassVar[bool] = False

    def observe_delay(self, delay_us: int) -> None:
        """Unused: the operator tracks the largest delay."""

    def observe_window(self, coverage: float, lambda_thr: float, needed_us: int = 0) -> None:
        """Ignored: MP-K-slack has no quality target."""

    def observe_unsettled(self, needed_us: Sequence[int]) -> None:
        """Ignored."""

    def slack(self, max_delay_us: int) -> int:
        """See :class:`SlackPolicy`."""
        return max_delay_us

    def snapshot(self) -> dict[str, Any]:
        """See :class:`SlackPolicy`."""
        return {"policy": self.name}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Nothing to load: the operator tracks the largest delay."""


@dataclass
class HPMSlack:
    """HPM: K = α·k, α driven by the PD controller (from its initial state, or from ``resume``)."""

    controller: PDController
    resume: InitVar[PDState | None] = None
    name: str = "hpm"
    follows_unsettled: ClassVar[bool] = False
    state: PDState = field(init=False)

    def __post_init__(self, resume: PDState | None) -> None:
        self.state = self.controller.initial() if resume is None else resume

    def observe_delay(self, delay_us: int) -> None:
        """Unused: the operator tracks the largest delay."""

    def observe_window(self, coverage: float, lambda_thr: float, needed_us: int = 0) -> None:
        """See :class:`SlackPolicy`."""
        self.state = self.controller.update(self.state, coverage, lambda_thr)

    def observe_unsettled(self, needed_us: Sequence[int]) -> None:
        """Ignored."""

    def slack(self, max_delay_us: int) -> int:
        """See :class:`SlackPolicy`."""
        return self.controller.buffer_us(self.state, max_delay_us)

    def snapshot(self) -> dict[str, Any]:
        """See :class:`SlackPolicy`."""
        return {"policy": self.name, "alpha": self.state.alpha, "last_error": self.state.last_error}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """See :class:`SlackPolicy`."""
        err = snapshot["last_error"]
        self.state = PDState(float(snapshot["alpha"]), None if err is None else float(err))


@dataclass
class RecentHPMSlack(HPMSlack):
    """HPM with ``k`` the largest delay of the last ``memory`` arrivals instead of all time (ours).

    HPM waits ``α·k`` with ``k`` the largest delay ever seen, so one outage raises K for good:
    even α at its floor keeps a share of that outage's delay. Over a sliding memory, K falls back
    once the outage's arrivals have left it, and α still answers the coverage.

    >>> p = RecentHPMSlack(PDController(lambda_thr=0.9, alpha_initial=0.5), memory=2)
    >>> for d in (8_000, 100, 200):
    ...     p.observe_delay(d)
    >>> p.slack(8_000)  # the 8 ms delay has left the memory of 2 arrivals: 0.5 · 200
    100
    """

    memory: int = 100_000
    name: str = "hpm-recent"
    _seen: int = field(default=0, init=False)
    _peaks: deque[tuple[int, int]] = field(default_factory=deque, init=False)  # (arrival, delay) falling

    def __post_init__(self, resume: PDState | None) -> None:
        super().__post_init__(resume)
        if self.memory < 1:
            msg = f"the delay memory must hold at least 1 arrival, got {self.memory}"
            raise ConfigError(msg)

    def observe_delay(self, delay_us: int) -> None:
        """Keep the running maximum of the last ``memory`` delays (a falling deque of peaks)."""
        while self._peaks and self._peaks[-1][1] <= delay_us:
            self._peaks.pop()
        self._peaks.append((self._seen, delay_us))
        self._seen += 1
        while self._peaks[0][0] <= self._seen - 1 - self.memory:
            self._peaks.popleft()

    def slack(self, max_delay_us: int) -> int:
        """``α`` times the largest recent delay (the all-time one is not used)."""
        recent = self._peaks[0][1] if self._peaks else 0
        return self.controller.buffer_us(self.state, recent)

    def snapshot(self) -> dict[str, Any]:
        """The controller's state, and the recent peaks."""
        return {**super().snapshot(), "seen": self._seen, "peaks": [list(p) for p in self._peaks]}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """See :class:`SlackPolicy`."""
        super().restore(snapshot)
        self._seen = int(snapshot["seen"])
        self._peaks = deque((int(a), int(d)) for a, d in snapshot["peaks"])


@dataclass
class LatenessSlack:
    """K = the quantile of what the last ``windows`` observed windows needed, capped at ``bound_us`` (ours).

    HPM's PD controller learns α from coverage errors, one window at a time: after a shift of the
    delay process it needs many windows to follow, and since K = α·k with k the largest delay ever
    seen, it never comes back down after an outage. But each observed window says exactly which
    constant K it needed (the smallest from which on its result is within ε,
    :mod:`outoforder.core.windows.lateness`), so this policy keeps the last ``windows`` of those
    needs and waits the level ``1 − δ·(1 − headroom)`` quantile of them: the share of windows
    (ε, δ) allows to miss, less a headroom for the noise of a short memory.

    Settled needs come a coverage horizon after a window closed. To follow a burst sooner, the
    windows closed and not yet observed join the pool with what they need *so far* (their late
    members until now: :meth:`observe_unsettled`), so K rises as soon as late tuples make closed
    windows miss ε; it falls once the burst's windows have left the memory. Until the first
    evidence it waits ``initial_us``.

    ``bound_us`` is the user's bound on K (the latency they accept): K never exceeds it, and
    :attr:`needed_us` / :attr:`reachable` say what the target would need and what the bound allows.

    >>> p = LatenessSlack(delta=0.1, windows=4, headroom=0.0, bound_us=5_000, initial_us=1_000)
    >>> p.slack(9_000)  # nothing observed yet
    1000
    >>> for need in (0, 1_000, 2_000, 3_000):
    ...     p.observe_window(1.0, 0.95, need)
    >>> p.slack(9_000), p.needed_us, p.reachable  # 90 % of 4 windows: all of them
    (3000, 3000, 1.0)
    >>> p.observe_unsettled([4_000])  # a closed window already needs 4 ms
    >>> p.slack(9_000)
    4000
    >>> for need in (8_000, 9_000):
    ...     p.observe_window(0.5, 0.95, need)
    >>> p.observe_unsettled([])
    >>> p.slack(9_000), p.needed_us, p.reachable, p.feasible
    (5000, 9000, 0.5, False)
    """

    delta: float = 0.05
    windows: int = 50
    headroom: float = 0.5
    bound_us: int | None = None
    initial_us: int = 1_000_000
    name: str = "lateness"
    follows_unsettled: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not (0.0 < self.delta < 1.0 and self.windows >= 1 and 0.0 <= self.headroom < 1.0):
            msg = (
                "the lateness policy needs 0 < δ < 1, a memory of at least 1 window and a headroom in "
                f"[0, 1); got δ {self.delta}, {self.windows} windows, headroom {self.headroom}"
            )
            raise ConfigError(msg)
        if (self.bound_us is not None and self.bound_us < 0) or self.initial_us < 0:
            msg = f"the bound on K and its initial value must be >= 0 µs: {self.bound_us}, {self.initial_us}"
            raise ConfigError(msg)
        self._needs: deque[int] = deque(maxlen=self.windows)  # settled
        self._unsettled: list[int] = []
        self._k: int | None = None  # None until the first evidence

    @property
    def level(self) -> float:
        """The share of recent windows K is to serve."""
        return 1.0 - self.delta * (1.0 - self.headroom)

    def _pool(self) -> list[int]:
        return [*self._needs, *self._unsettled]

    @property
    def needed_us(self) -> int | None:
        """The K the recent windows need at :attr:`level`, unbounded (None before any evidence)."""
        return need_at(self._pool(), self.level)

    @property
    def reachable(self) -> float | None:
        """The share of recent windows whose need the bound allows (None before any evidence)."""
        pool = self._pool()
        if not pool:
            return None
        if self.bound_us is None:
            return 1.0
        return sum(n <= self.bound_us for n in pool) / len(pool)

    @property
    def feasible(self) -> bool | None:
        """Whether the bound lets through the share of windows (ε, δ) needs: ``reachable >= 1 − δ``."""
        reach = self.reachable
        return None if reach is None else reach >= 1.0 - self.delta - 1e-12

    def observe_delay(self, delay_us: int) -> None:
        """Unused: the windows' needs carry what the delays mean for them."""

    def _bounded(self, k: int) -> int:
        return k if self.bound_us is None else min(k, self.bound_us)

    def observe_window(self, coverage: float, lambda_thr: float, needed_us: int = 0) -> None:
        """See :class:`SlackPolicy`: the window's need joins the memory."""
        self._needs.append(int(needed_us))
        self._decide()

    def observe_unsettled(self, needed_us: Sequence[int]) -> None:
        """See :class:`SlackPolicy`: the closed windows' needs so far join the pool until they settle."""
        self._unsettled = [int(n) for n in needed_us]
        self._decide()

    def _decide(self) -> None:
        need = self.needed_us
        if need is not None:
            self._k = self._bounded(need)

    def slack(self, max_delay_us: int) -> int:
        """See :class:`SlackPolicy`."""
        return self._bounded(self.initial_us) if self._k is None else self._k

    def snapshot(self) -> dict[str, Any]:
        """See :class:`SlackPolicy`."""
        return {
            "policy": self.name,
            "needs": list(self._needs),
            "unsettled": list(self._unsettled),
            "k_us": self._k,
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """See :class:`SlackPolicy`."""
        self._needs = deque((int(n) for n in snapshot["needs"]), maxlen=self.windows)
        self._unsettled = [int(n) for n in snapshot["unsettled"]]
        k = snapshot["k_us"]
        self._k = None if k is None else int(k)


@dataclass
class AQSlack:
    """AQ-K-slack: K = the recent-delay quantile at level λ_thr + u, u PD-controlled."""

    controller: PDController = field(
        default_factory=lambda: PDController(lambda_thr=0.0, alpha_initial=0.0, alpha_min=-1.0, alpha_max=1.0)
    )
    history: int = 2_000
    name: str = "aq-kslack"
    follows_unsettled: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.history < 1:
            msg = f"AQ-K-slack needs a delay history of at least 1, got {self.history}"
            raise ConfigError(msg)
        self._delays: deque[int] = deque(maxlen=self.history)
        self._state = self.controller.initial()
        self._level = 1.0
        self._k = 0

    def observe_delay(self, delay_us: int) -> None:
        """See :class:`SlackPolicy`."""
        self._delays.append(delay_us)

    def observe_window(self, coverage: float, lambda_thr: float, needed_us: int = 0) -> None:
        """See :class:`SlackPolicy`."""
        self._state = self.controller.update(self._state, coverage, lambda_thr)
        self._level = min(1.0, max(0.0, lambda_thr + self._state.alpha))
        if self._delays:
            d = np.fromiter(self._delays, dtype=np.int64, count=len(self._delays))
            self._k = int(np.quantile(d, self._level, method="inverted_cdf"))

    def observe_unsettled(self, needed_us: Sequence[int]) -> None:
        """Ignored."""

    def slack(self, max_delay_us: int) -> int:
        """See :class:`SlackPolicy`."""
        # Until a window has been observed, wait like MP-K-slack (no evidence to do better).
        return max_delay_us if self._state.last_error is None else self._k

    def snapshot(self) -> dict[str, Any]:
        """See :class:`SlackPolicy`."""
        return {
            "policy": self.name,
            "u": self._state.alpha,
            "last_error": self._state.last_error,
            "level": self._level,
            "k_us": self._k,
            "delays": list(self._delays),
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """See :class:`SlackPolicy`."""
        err = snapshot["last_error"]
        self._state = PDState(float(snapshot["u"]), None if err is None else float(err))
        self._level, self._k = float(snapshot["level"]), int(snapshot["k_us"])
        self._delays = deque((int(d) for d in snapshot["delays"]), maxlen=self.history)
