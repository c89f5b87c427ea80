"""HPM's PD controller of the buffer factor α (docs/operators.md, HPM; docs/aggregates.md).

The buffer is ``K = α·k`` with k the largest delay seen so far. After each window closes, its
coverage ``λ_i = n_rcv / (n_rcv + n_late)`` is compared with the coverage the (ε, δ) target needs,
``λ_thr``: ``err(i) = λ_thr − λ_i``, and ``α ← α + K_p·err(i) + K_d·(err(i) − err(i−1))``
(K_p = 0.2, K_d = 4 in the paper), clipped to ``[alpha_min, alpha_max]``. A window whose coverage
falls short raises α (wait longer); a comfortable surplus lowers it.

The state is a small frozen value, so it can be snapshotted with the operator and the update is
a pure function of (state, observation).

>>> pd = PDController(lambda_thr=0.95)
>>> s = pd.initial()
>>> s = pd.update(s, coverage=0.85)   # 10 points short: α rises
>>> round(s.alpha, 3)
0.62
>>> s = pd.update(s, coverage=0.95)   # on target, error fell by 0.1: the D term pulls back
>>> round(s.alpha, 3)
0.22
"""

from __future__ import annotations

from dataclasses import dataclass

from outoforder.errors import ConfigError


@dataclass(frozen=True)
class PDState:
    """α in force and the previous error (None before the first window)."""

    alpha: float
    last_error: float | None = None


@dataclass(frozen=True)
class PDController:
    """Gains, target coverage and the range α may take."""

    lambda_thr: float
    k_p: float = 0.2
    k_d: float = 4.0
    alpha_initial: float = 0.6
    alpha_min: float = 0.0
    alpha_max: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.lambda_thr <= 1.0:
            msg = f"lambda_thr must be in [0, 1], got {self.lambda_thr}"
            raise ConfigError(msg)
        if not self.alpha_min <= self.alpha_initial <= self.alpha_max:
            msg = (
                "need alpha_min <= alpha_initial <= alpha_max, got "
                f"{self.alpha_min}, {self.alpha_initial}, {self.alpha_max}"
            )
            raise ConfigError(msg)

    def initial(self) -> PDState:
        """The state before the first closed window."""
        return PDState(self.alpha_initial)

    def update(self, state: PDState, coverage: float, lambda_thr: float | None = None) -> PDState:
        """The new α after a window closed with ``coverage``.

        ``lambda_thr`` overrides the controller's target for this window: the coverage an (ε, δ)
        target needs depends on the window's own size and spread (:mod:`outoforder.core.windows.quality`).
        """
        err = (self.lambda_thr if lambda_thr is None else lambda_thr) - coverage
        d = 0.0 if state.last_error is None else err - state.last_error
        alpha = min(self.alpha_max, max(self.alpha_min, state.alpha + self.k_p * err + self.k_d * d))
        return PDState(alpha, err)

    def buffer_us(self, state: PDState, max_delay_us: int) -> int:
        """K = α·k."""
        return round(state.alpha * max(max_delay_us, 0))
