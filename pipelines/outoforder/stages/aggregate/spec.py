"""The aggregate job: streams, aggregate, sliding windows, the (ε, δ) target, the buffer's controller and Γ.

The defaults are HPM's experiments, except the controller: K is set by the lateness controller
(:class:`~outoforder.core.windows.slack.LatenessSlack`: what recent windows needed) unless
``--controller paper`` asks for HPM's PD controller of α (K = α·k).

Every parameter is declared once here (see :mod:`outoforder.stages.spec`); the CLI, the DAGs
``aggregate_stream`` and ``late_repair`` and the job id derive from it. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.errors import ConfigError
from outoforder.stages.options import PASS, arg, since, until, validation, yes
from outoforder.stages.registry import Operator, Stage, Step
from outoforder.stages.spec import Job, param

if TYPE_CHECKING:
    from outoforder.core.control.pd import PDController
    from outoforder.core.windows.buffered import WindowQuery
    from outoforder.core.windows.slack import LatenessSlack

CONTROLLERS = ("lateness", "paper")  # core/windows/slack.py: LatenessSlack, HPMSlack


@dataclass(frozen=True)
class AggJob(Job):
    """What to aggregate and the quality target.

    Γ paces the repair, not the stream: it does not identify the job, so a repair with another Γ
    works on the same tables.

    >>> base = AggJob().job_id()
    >>> AggJob(gamma_us=1).job_id() == base, AggJob(aggregate="avg").job_id() == base
    (True, False)
    """

    PREFIX = "ag"

    streams: tuple[str, ...] = param((), help="streams to aggregate (comma-separated; empty: all)")
    aggregate: str = param("sum", help="sum, count, avg, min, max, median or quantile:q")
    window_us: int = param(
        500_000, unit="s", help="window size", above=0, formerly=("window_ms",), key="size_us"
    )
    slide_us: int = param(100_000, unit="s", help="window slide", above=0, formerly=("slide_ms",))
    eps: float = param(0.05, help="ε: the relative error bound", above=0, below=1)
    delta: float = param(0.05, help="δ: the share of windows allowed to miss ε", above=0, below=1)
    controller: str = param(
        "lateness", help="how the buffer K is chosen", choices=CONTROLLERS, renamed={"seed": "paper"}
    )
    latency_bound_us: int | None = param(
        None,
        unit="s",
        identifies=False,
        minimum=0,
        help="lateness: the latency bound, K never above it (none: unbounded)",
        formerly=("max_k_s",),
    )
    headroom: float = param(
        0.8,
        identifies=False,
        minimum=0,
        below=1,
        help="lateness: K aims at the share (1 - δ) + headroom·δ of the recent windows",
    )
    memory: int = param(50, identifies=False, minimum=1, help="lateness: the recent windows K is read off")
    initial_k_us: int = param(
        1_000_000,
        unit="s",
        identifies=False,
        minimum=0,
        help="lateness: K before the first window's need is known",
    )
    k_p: float = param(0.2, help="paper: the PD controller's K_p", formerly=("kp",))
    k_d: float = param(4.0, help="paper: the PD controller's K_d", formerly=("kd",))
    alpha_initial: float = param(0.6, help="paper: initial α (K = α · largest delay)",
                                 minimum=0, maximum=1, formerly=("alpha0",))  # fmt: skip
    # K never below 5 % of the largest delay (docs/aggregates.md says why)
    alpha_min: float = param(0.05, help="paper: the floor of α (0: the paper's own)", minimum=0,
                             maximum=1)  # fmt: skip
    coverage_horizon_us: int = param(1_000_000, unit="s",
                                     help="a window's coverage is observed this long after it closed",
                                     minimum=0, formerly=("horizon_ms",))  # fmt: skip
    gamma_us: int = param(5_000_000, unit="s", identifies=False, minimum=0,
                          help="Γ: repair once the pending late tuples span more event time")  # fmt: skip

    def check(self) -> None:
        """Sliding windows without gaps (the aggregate's name is checked by :meth:`query`)."""
        if self.slide_us > self.window_us:
            msg = f"--slide-s ({self.slide_us / 1e6:g}) > --window-s ({self.window_us / 1e6:g}) leaves gaps"
            raise ConfigError(msg)

    def query(self) -> WindowQuery:
        """The window query and its target."""
        from outoforder.core.windows.assign import Windows
        from outoforder.core.windows.buffered import WindowQuery

        return WindowQuery(
            Windows(self.window_us, self.slide_us),
            self.aggregate,
            self.eps,
            self.delta,
            self.coverage_horizon_us,
        )

    def lateness(self) -> LatenessSlack:
        """The lateness controller (fresh): K from what recent windows needed, within the bound.

        Under the paper's controller it still runs, beside it: its statistics make the job's
        feasibility statement.
        """
        from outoforder.core.windows.slack import LatenessSlack

        return LatenessSlack(self.delta, self.memory, self.headroom, self.latency_bound_us, self.initial_k_us)

    def pd_controller(self) -> PDController:
        """HPM's PD controller (the target coverage is given per window)."""
        from outoforder.core.control.pd import PDController

        return PDController(
            lambda_thr=1.0 - self.eps,
            k_p=self.k_p,
            k_d=self.k_d,
            alpha_initial=self.alpha_initial,
            alpha_min=self.alpha_min,
        )


_C = "outoforder.stages.aggregate.commands"
_STATE = ("silver/agg_state",)

OPERATOR = Operator(
    name="aggregate",
    summary="HPM: sliding-window aggregates whose buffer meets an (ε, δ) target; exact repair of late tuples",
    job=AggJob,
    stream="aggregate-stream",
    check="validate-aggregate",
    stages=(
        Stage(
            "aggregate-stream",
            "sliding-window aggregates with HPM: one pass over everything new (DAG aggregate_stream)",
            f"{_C}:aggregate_stream",
            AggJob,
            args=(
                *PASS,
                arg("--repair", action="store_true", help="check the Γ rule (and repair) after the pass"),
            ),
            reads=("bronze/arrivals", *_STATE),
            writes=("gold/agg_results", "silver/agg_ledger", *_STATE),
        ),
        Stage(
            "aggregate-repair",
            "recompute the windows of pending late tuples exactly, by the Γ rule (DAG late_repair)",
            f"{_C}:aggregate_repair",
            AggJob,
            args=(
                arg(
                    "--force",
                    type=yes,
                    nargs="?",
                    const=True,
                    default=False,
                    help="repair whatever is pending, Γ or not",
                ),
            ),
            reads=("bronze/arrivals", "silver/agg_ledger", "gold/agg_results"),
            writes=("gold/agg_results", "gold/agg_repairs", "silver/agg_ledger"),
        ),
        Stage(
            "validate-aggregate",
            "(ε, δ) at emission, exactness after repair, every window once (GX)",
            f"{_C}:validate_aggregate",
            AggJob,
            args=validation(
                until(
                    "check the windows closed by this arrival time (default: the newest state)",
                    required=False,
                ),
                *since("windows"),
                arg(
                    "--repaired",
                    action="store_true",
                    help="check only the windows the newest repair recomputed (DAG late_repair)",
                ),
            ),
            reads=("bronze/arrivals", "gold/agg_results", "gold/agg_repairs", "silver/agg_ledger", *_STATE),
            writes=("gold/quality_measures", "gold/quality_runs", "gold/check_positions"),
            judges=("gold/agg_results",),
        ),
    ),
    steps=(Step("aggregates", "outoforder.stages.demo:aggregates"),),
    contract="outoforder.checks.windows:cases",
)
