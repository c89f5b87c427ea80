"""The θ-join job: streams of a source, the join column, chained predicates, the window; and how to run it.

Every parameter is declared once here (see :mod:`outoforder.stages.spec`); the CLI, the DAG
``theta_backfill`` and the job id derive from it. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from outoforder.core.theta.predicate import parse_predicate
from outoforder.errors import ConfigError
from outoforder.stages.options import arg, validation
from outoforder.stages.registry import Operator, Stage, Step
from outoforder.stages.spec import SAMPLE, Job, param

if TYPE_CHECKING:
    from outoforder.core.theta.plan import Theta

COLUMNS = ("value", "x", "y", "z", "event_ts")
METHODS = ("fast", "cfs", "one-bucket", "spark-sql", "cross")
PREFILTERS = ("none", "mcf", "semi")  # see outoforder.spark.mcf


@dataclass(frozen=True)
class ThetaJob(Job):
    """``S0.column θ0 S1.column θ1 S2.column …`` per tumbling event-time window.

    The method, the partitions and the pre-filter change how, not what: they do not identify the
    job, so a backfill rerun with another method replaces the same rows.

    >>> ThetaJob().job_id() == ThetaJob(method="cfs", partitions=3).job_id()
    True
    """

    PREFIX = "th"

    streams: tuple[str, ...] = param(("ball", "team_a"), help="streams S0,S1,… of the source, in chain order")
    # positions, not speeds (a replay's ball speed takes a handful of values, mostly 0): ball.x within
    # 1 cm of team_a.x over 10 s windows, what the main job runs
    column: str = param("x", help="the join column", choices=COLUMNS)
    predicates: tuple[str, ...] = param(
        ("band:0.01",), help="θ0,θ1,… between neighbours: <, <=, >=, >, = or band:c"
    )
    window_us: int = param(10_000_000, unit="s", help="tumbling event-time window", above=0)
    method: str = param("fast", help="the join algorithm", choices=METHODS, identifies=False)
    partitions: int = param(16, help="FastThetaJoin's range partitions", minimum=1, identifies=False)
    prefilter: str = param(
        "none",
        choices=PREFILTERS,
        identifies=False,
        help="equi-joins: drop rows whose key another stream lacks first (MCF, or exact)",
    )

    def check(self) -> None:
        """Enough streams, one predicate per neighbouring pair, a pre-filter only on equi-joins."""
        if len(self.streams) < 2:
            msg = f"a θ-join needs at least two streams, got {list(self.streams)}"
            raise ConfigError(msg)
        if len(self.predicates) != len(self.streams) - 1:
            msg = (
                f"{len(self.streams)} streams need {len(self.streams) - 1} chained predicates "
                f"(S0 θ0 S1 θ1 S2 …), got {list(self.predicates)}"
            )
            raise ConfigError(msg)
        ops = [parse_predicate(p)[0] for p in self.predicates]  # parse errors surface when the job is built
        if self.prefilter != "none" and any(op != "=" for op in ops):
            msg = (
                f"the {self.prefilter} pre-filter needs an equi-join (every predicate '='), "
                f"got {list(self.predicates)}"
            )
            raise ConfigError(msg)

    def thetas(self) -> list[Theta]:
        """The parsed predicates."""
        from outoforder.core.theta.plan import Theta

        return [Theta.parse(p) for p in self.predicates]

    def windows(self, start_us: int, end_us: int) -> list[int]:
        """Window starts of ``[start, end)``, which must be whole windows."""
        w = self.window_us
        if end_us <= start_us or start_us % w or end_us % w:
            msg = (
                f"the interval [{start_us}, {end_us}) µs must be non-empty and cut at multiples of the "
                f"window ({w} µs); e.g. [{start_us // w * w}, {-(-end_us // w) * w})"
            )
            raise ConfigError(msg)
        return list(range(start_us, end_us, w))


_C = "outoforder.stages.theta.commands"

OPERATOR = Operator(
    name="theta",
    summary="multi-way θ-joins per event-time window: FastThetaJoin on Spark, MCF pre-filters for equi-joins",
    job=ThetaJob,
    params=(SAMPLE,),
    stages=(
        Stage(
            "theta-join",
            "multi-way θ-join backfill of bronze windows (DAG theta_backfill), or of your files",
            f"{_C}:theta_join",
            ThetaJob,
            source=False,
            args=(
                arg("--source", help="the bronze source id"),
                arg("--start", help="event-time interval start (µs or ISO 8601), a window multiple"),
                arg("--end", help="interval end, exclusive"),
                arg(
                    "--file", action="append", help="a stream of your own (CSV or Parquet); give two or more"
                ),
                arg("--out", help="with --file: write the result rows here (Parquet)"),
            ),
            reads=("bronze/arrivals",),
            writes=("gold/theta_results", "gold/theta_windows"),
        ),
        Stage(
            "validate-theta",
            "completeness of a θ-join backfill against DuckDB on sampled windows (GX)",
            f"{_C}:validate_theta",
            ThetaJob,
            args=validation(
                arg("--start", required=True, help="event-time interval start"),
                arg("--end", required=True, help="interval end, exclusive"),
                arg(SAMPLE.flag, type=int, default=SAMPLE.default, help=SAMPLE.help),
            ),
            reads=("bronze/arrivals", "gold/theta_results", "gold/theta_windows"),
            writes=("gold/quality_runs",),
        ),
    ),
    steps=(Step("theta", "outoforder.stages.demo:theta"),),
)
