"""The stream join's job: the query (R and S streams, window, predicate), the recall target and its cadence.

Every parameter is declared once here (see :mod:`outoforder.stages.spec`); the CLI, the DAGs
``join_stream`` and the job id derive from it. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.errors import ConfigError
from outoforder.stages.options import PASS, arg, seconds, since, until, validation
from outoforder.stages.registry import Operator, Stage, Step
from outoforder.stages.spec import Job, param

if TYPE_CHECKING:
    from outoforder.core.joins.adaptation import AdaptationSettings
    from outoforder.core.joins.query import JoinQuery

ESTIMATORS = ("learned", "paper", "reactive", "robust")  # as outoforder.core.joins.adaptation's
# what the evaluation (``join`` stage) runs side by side (outoforder.stages.join.evaluate)
METHODS = (
    *(f"qjoin-{e}" for e in ESTIMATORS), "qjoin-hindsight", "kslack-hindsight", "mp-kslack", "aq-kslack",
)  # fmt: skip


@dataclass(frozen=True)
class JoinJob(Job):
    """What to join and how to judge it; the defaults are the main job's ball-vs-players query.

    >>> JoinJob().job_id(), JoinJob(q_user=0.9).job_id() == JoinJob().job_id()
    ('qj-07ef2b739a', False)
    """

    PREFIX = "qj"

    r_streams: tuple[str, ...] = param(("ball",), help="streams forming R (comma-separated)")
    s_streams: tuple[str, ...] = param(("team_a", "team_b"), help="streams forming S (comma-separated)")
    window_us: int = param(
        500_000, unit="s", help="w: pairs with |r.ts - s.ts| <= w", minimum=0, formerly=("window_ms",)
    )
    theta: float = param(2.0, help="distance threshold (metres) of the distance predicate", minimum=0)
    predicate: str = param("distance", help="distance (x, y within θ) or key (equal keys)",
                           choices=("distance", "key"))  # fmt: skip
    q_user: float = param(0.95, help="recall target per period", above=0, maximum=1)
    period_us: int = param(5_000_000, unit="s", help="P, the period recall is judged over", above=0)
    interval_us: int = param(500_000, unit="s", help="L, the adaptation interval of the estimator", above=0)
    granularity_us: int = param(10_000, option=None, help="g, the step of the retention search")
    warmup_periods: int = param(1, option=None, help="periods left out of the evaluation's summary")
    estimator: str = param("robust", help="how the retention is chosen", choices=ESTIMATORS)
    headroom: float = param(
        0.5,
        identifies=False,
        minimum=0,
        below=1,
        help="robust: each interval aims at least at q_user + headroom·(1 - q_user)",
    )
    memory_periods: int = param(
        20,
        identifies=False,
        minimum=0,
        help="robust: keep at least what each of the last M periods needed (recurring outages, bursts)",
    )
    memory_margin: float = param(
        0.5,
        identifies=False,
        minimum=0,
        help="robust: keep (1 + margin) times what the last M periods needed (a record seldom beats "
        "the last by more)",
    )
    latency_bound_us: int | None = param(
        None,
        unit="s",
        identifies=False,
        minimum=0,
        help="the latency bound: no stream's retention (its buffer) above it (none: unbounded)",
        formerly=("max_retention_s",),
    )
    initial_retention_us: int | None = param(
        None,
        unit="s",
        identifies=False,
        minimum=0,
        help="each stream's retention before the first adaptation (none: the period P, capped by the "
        "bound: nothing is dropped before there is evidence)",
    )

    def check(self) -> None:
        """R and S are non-empty and disjoint: a stream in both would join with itself, silently R's."""
        if not self.r_streams or not self.s_streams:
            msg = (
                f"a join needs streams on both sides, got R {list(self.r_streams)}, S {list(self.s_streams)}"
            )
            raise ConfigError(msg)
        both = sorted(set(self.r_streams) & set(self.s_streams))
        if both:
            named = ", ".join(map(repr, both))
            msg = f"stream {named} is named in both R and S: each stream belongs to one side"
            raise ConfigError(msg)

    def initial_retention(self) -> int:
        """Each stream's retention before the controller's first decision.

        >>> JoinJob().initial_retention()
        5000000
        >>> JoinJob(latency_bound_us=2).initial_retention()
        2
        """
        if self.initial_retention_us is not None:
            return self.initial_retention_us
        return self.period_us if self.latency_bound_us is None else min(self.latency_bound_us, self.period_us)

    def query(self) -> JoinQuery:
        """The join query."""
        from outoforder.core.joins.query import JoinQuery

        return JoinQuery(self.window_us, self.theta, self.predicate)  # type: ignore[arg-type]

    def adaptation(self, estimator: str | None = None) -> AdaptationSettings:
        """The controller's settings (with this job's estimator unless another is named)."""
        from outoforder.core.joins.adaptation import AdaptationSettings

        return AdaptationSettings(
            q_user=self.q_user,
            period_us=self.period_us,
            interval_us=self.interval_us,
            granularity_us=self.granularity_us,
            basic_window_us=self.granularity_us,
            estimator=estimator or self.estimator,  # type: ignore[arg-type]
            headroom=self.headroom,
            memory_periods=self.memory_periods,
            memory_margin=self.memory_margin,
            max_retention_us=self.latency_bound_us,
        )


_C = "outoforder.stages.join.commands"
_BRONZE = ("bronze/arrivals",)
_STATE = ("silver/join_state",)

OPERATOR = Operator(
    name="join",
    summary="QJoin: a window join that emits at once, sizing each stream's buffer for a recall target",
    job=JoinJob,
    stream="join-stream",
    check="validate-join",
    stages=(
        Stage(
            "join",
            "evaluate QJoin and the K-slack baselines",
            f"{_C}:join",
            JoinJob,
            source=False,
            exclude=("estimator",),
            args=(
                arg("--source", help="a bronze source id (e.g. synthetic/hpm_game1-20s-seed7)"),
                arg("--file", help="or a CSV/Parquet file: stream|side, event_ts|ts (µs), x, y (or key)"),
                arg("--methods", default=",".join(METHODS), help="comma-separated subset"),
                arg("--out", help="where to write the JSON summary"),
            ),
            reads=_BRONZE,
        ),
        Stage(
            "join-stream",
            "the stream join: one pass over everything new, adapting every L (DAG join_stream)",
            f"{_C}:join_stream",
            JoinJob,
            args=PASS,
            reads=(*_BRONZE, *_STATE),
            writes=("gold/join_results", "silver/join_params", *_STATE),
        ),
        Stage(
            "join-repair",
            "add the true pairs the stream join missed (recall becomes exact)",
            f"{_C}:join_repair",
            JoinJob,
            args=(
                until("repair the history before this arrival time"),
                arg(
                    "--span-s",
                    type=seconds,
                    help="only the last this many seconds of arrivals (default: all)",
                ),
            ),
            reads=(*_BRONZE, "gold/join_results"),
            writes=("gold/join_results",),
        ),
        Stage(
            "validate-join",
            "recall per closed period and duplicate checks (GX)",
            f"{_C}:validate_join",
            JoinJob,
            args=validation(
                until(
                    "check the periods closed by this arrival time (default: the newest state)",
                    required=False,
                ),
                *since("periods"),
            ),
            reads=(*_BRONZE, "gold/join_results"),
            writes=(
                "gold/join_metrics",
                "gold/quality_measures",
                "gold/quality_runs",
                "gold/check_positions",
            ),
            judges=("gold/join_results",),
        ),
    ),
    steps=(
        Step("join", "outoforder.stages.demo:join"),
        Step("stream-join", "outoforder.stages.demo:stream_join"),
    ),
    contract="outoforder.checks.joins:cases",
)
