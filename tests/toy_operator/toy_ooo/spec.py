"""The toy's job and stages (standard library only: Airflow imports this when it parses the DAGs)."""

from __future__ import annotations

from dataclasses import dataclass

from outoforder.stages.options import PASS, arg, since, until, validation
from outoforder.stages.registry import Operator, Stage
from outoforder.stages.spec import Job, param


@dataclass(frozen=True)
class ToyJob(Job):
    """Count the arrivals per tumbling window, emitted once the stream passes its end plus the slack."""

    PREFIX = "ty"

    window_us: int = param(1_000_000, unit="s", help="tumbling event-time window", above=0)
    slack_us: int = param(100_000, unit="s", help="how long after a window's end it is emitted", minimum=0)


OPERATOR = Operator(
    name="toy",
    summary="arrivals counted per tumbling window after a fixed slack",
    job=ToyJob,
    stream="toy-stream",
    check="validate-toy",
    contract="toy_ooo.core:cases",
    stages=(
        Stage(
            "toy-stream",
            "count a file's arrivals per window (or a bronze interval's)",
            "toy_ooo.commands:toy_stream",
            ToyJob,
            args=(*PASS, arg("--file", help="a CSV file with an event_ts column (µs)")),
        ),
        Stage(
            "validate-toy",
            "every window counted once",
            "toy_ooo.commands:validate_toy",
            ToyJob,
            args=validation(until("judge the windows closed by then", required=False), *since("windows")),
        ),
    ),
)
