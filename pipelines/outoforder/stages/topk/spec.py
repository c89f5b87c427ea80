"""The continuous top-k job: the query (streams, score, k, sliding windows) and the cache duration's settings.

The declared defaults are the seed's query (60 s windows sliding by 5 s), what the CLI and the
``topk_stream`` DAG run; :data:`DEMO_JOB` scales it to the main job's 20 s replay. Every parameter is
declared once here (see :mod:`outoforder.stages.spec`). Standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.errors import ConfigError
from outoforder.stages.options import PASS, since, until, validation
from outoforder.stages.registry import Operator, Stage, Step
from outoforder.stages.spec import Job, param

if TYPE_CHECKING:
    from outoforder.core.topk.cache import CacheSettings, LatenessSettings
    from outoforder.core.topk.operator import TopK, TopKQuery
    from outoforder.core.windows.assign import Windows

SCORE_COLUMNS = ("value", "x", "y", "z")
CONTROLLERS = ("lateness", "paper")  # core/topk/cache.py: LatenessController, CacheDurationController


@dataclass(frozen=True)
class TopKJob(Job):
    """The query and the cache controller's settings.

    >>> TopKJob().job_id() == TopKJob().job_id(), TopKJob(k=3).job_id() == TopKJob().job_id()
    (True, False)
    """

    PREFIX = "tk"

    streams: tuple[str, ...] = param((), help="streams to rank (comma-separated; empty: all)")
    score: str = param("value", help="the score column", choices=SCORE_COLUMNS)
    k: int = param(5, help="results per window", minimum=1)
    window_us: int = param(60_000_000, unit="s", help="window size", above=0)
    slide_us: int = param(5_000_000, unit="s", help="window slide", above=0)
    eps_min: float = param(0.95, help="ε_min: the lowest acceptable accuracy", above=0, maximum=1)
    controller: str = param(
        "lateness", help="how the cache duration K is chosen", choices=CONTROLLERS, renamed={"seed": "paper"}
    )
    initial_cache_us: int = param(
        2_000_000,
        unit="s",
        help="the initial cache duration K",
        above=0,
        formerly=("cache_s",),
        key="initial_us",
    )
    latency_bound_us: int | None = param(
        None,
        unit="s",
        identifies=False,
        minimum=0,
        help="lateness: the latency bound, K never above it (none: unbounded)",
        formerly=("max_cache_s",),
    )
    headroom: float = param(
        0.5,
        identifies=False,
        minimum=0,
        below=1,
        help="lateness: K aims at ε_min + headroom·(1 - ε_min)",
    )
    m: int = param(10, help="paper: candidate durations per decision", minimum=1)
    n: int = param(30, help="windows scored per decision (paper) or of evidence (lateness)", minimum=1)
    min_step_us: int = param(10_000, option=None, help="the smallest step of the candidate interval")
    horizon_us: int = param(
        10_000_000,
        unit="s",
        minimum=0,
        help="late tuples are awaited this long after an emission, for scoring",
    )
    fixed_cache_us: int | None = param(
        None, unit="s", minimum=0, help="a fixed K instead of the adaptive duration"
    )

    def check(self) -> None:
        """Sliding windows without gaps (the single values are checked against their bounds)."""
        if self.slide_us > self.window_us:
            msg = f"--slide-s ({self.slide_us / 1e6:g}) > --window-s ({self.window_us / 1e6:g}) leaves gaps"
            raise ConfigError(msg)

    def windows(self) -> Windows:
        """The sliding windows."""
        from outoforder.core.windows.assign import Windows

        return Windows(self.window_us, self.slide_us)

    def query(self) -> TopKQuery:
        """The operator's query."""
        from outoforder.core.topk.operator import TopKQuery

        return TopKQuery(self.windows(), self.k, self.horizon_us)

    @property
    def bound_us(self) -> float:
        """The latency bound K stays under (µs; inf: none)."""
        return math.inf if self.latency_bound_us is None else float(self.latency_bound_us)

    def cache_settings(self) -> LatenessSettings | CacheSettings:
        """The controller's settings."""
        from outoforder.core.topk.cache import CacheSettings, LatenessSettings

        if self.controller == "paper":
            return CacheSettings(
                float(self.initial_cache_us), self.m, self.n, self.eps_min, float(self.min_step_us)
            )
        return LatenessSettings(
            float(self.initial_cache_us), self.n, self.eps_min, self.bound_us, self.headroom
        )

    def operator(self) -> TopK:
        """A fresh operator: the adaptive cache duration, or the fixed one."""
        from outoforder.core.topk.operator import TopK

        fixed = self.fixed_cache_us
        return TopK(self.query(), self.cache_settings() if fixed is None else float(fixed))


# The seed's query scaled to the main job's 20 s replay (60 s windows would never close there).
DEMO_JOB = TopKJob(
    streams=("team_a", "team_b"), window_us=4_000_000, slide_us=500_000, n=10, horizon_us=2_000_000
)


_C = "outoforder.stages.topk.commands"
_STATE = ("silver/topk_state",)

OPERATOR = Operator(
    name="topk",
    summary="continuous top-k over out-of-order sliding windows with an adaptive cache duration",
    job=TopKJob,
    stream="topk-stream",
    check="validate-topk",
    stages=(
        Stage(
            "topk-stream",
            "continuous top-k, its cache duration adapted: one pass over everything new (DAG topk_stream)",
            f"{_C}:topk_stream",
            TopKJob,
            args=PASS,
            reads=("bronze/arrivals", *_STATE),
            writes=("gold/topk_results", "silver/topk_ledger", *_STATE),
        ),
        Stage(
            "validate-topk",
            "every window emitted once, accuracy of the closed windows >= ε_min (GX)",
            f"{_C}:validate_topk",
            TopKJob,
            args=validation(
                until(
                    "check the windows closed by this arrival time (default: the newest state)",
                    required=False,
                ),
                *since("windows"),
            ),
            reads=("bronze/arrivals", "gold/topk_results", "silver/topk_ledger", *_STATE),
            writes=("gold/quality_measures", "gold/quality_runs", "gold/check_positions"),
            judges=("gold/topk_results",),
        ),
    ),
    steps=(Step("topk", "outoforder.stages.demo:topk"),),
    contract="outoforder.checks.topk:cases",
)
