"""The ingest stages: files, Kafka and replays into bronze; its disorder statistics and checks.

Standard library only (see :mod:`outoforder.stages.registry`).
"""

from __future__ import annotations

from outoforder.stages.options import arg, non_negative, positive, seconds, validation
from outoforder.stages.registry import Operator, Stage, Step

_C = "outoforder.stages.ingest.commands"
_BRONZE = ("bronze/arrivals", "bronze/quarantine", "bronze/ingest_log")

OPERATOR = Operator(
    name="ingest",
    summary="files, a landing bucket and Kafka topics into bronze (bad lines quarantined), its checks",
    stages=(
        Stage(
            "ingest",
            "read files into bronze",
            f"{_C}:ingest",
            args=(
                arg("--datasets", nargs="*", help="built-in dataset ids or prefixes (default: all)"),
                arg(
                    "--file",
                    action="append",
                    help="a file of your own (plain or gzip) or a folder of them; repeatable",
                ),
                arg(
                    "--reader",
                    help="its format: a source declared in the config ([sources.<name>]) or a "
                    "built-in reader (debs2013, soccer_synthetic, ooo, debs2015)",
                ),
                arg("--source", help="the source id to store it under (default: the reader's name)"),
                arg("--landing", action="store_true", help="ingest the files waiting in the landing bucket"),
            ),
            writes=_BRONZE,
        ),
        Stage(
            "ingest-kafka",
            "a Kafka source's new records into bronze",
            f"{_C}:ingest_kafka",
            args=(arg("--source", required=True, help="a source declared with a topic ([sources.<name>])"),),
            reads=("bronze/kafka_offsets",),
            writes=(*_BRONZE, "bronze/kafka_offsets"),
        ),
        Stage(
            "produce",
            "replay a bronze source into a Kafka topic",
            f"{_C}:produce",
            args=(
                arg("--source", required=True, help="the bronze source to replay, in its arrival order"),
                arg("--topic", required=True, help="created (log-append time) if it does not exist"),
                arg("--partitions", type=int, default=3, help="of a topic it creates (default 3)"),
                arg(
                    "--speed",
                    type=non_negative,
                    default=0.0,
                    help="1 = the source's own arrival pace, 10 = ten times faster, 0 = as fast as possible "
                    "(default)",
                ),
                arg("--limit", type=int, help="only the first N rows"),
                arg(
                    "--live",
                    action="store_true",
                    help="shift event times by one constant so the first arrival is now (replays with their "
                    "own clock)",
                ),
                arg("--name", default="replayed", help="the source name in the printed declaration"),
                arg("--declaration", help="also write the declaration to this file, before sending"),
                arg(
                    "--only-declare",
                    action="store_true",
                    help="create the topic and write the declaration; send nothing",
                ),
            ),
            reads=("bronze/arrivals",),
        ),
        Stage(
            "replay",
            "synthetic soccer play with injected disorder, ingested",
            f"{_C}:replay",
            args=(
                arg("--model", default="hpm_game1", help="a preset or family:key=value,..."),
                arg("--seconds", type=seconds, default=20.0),
                arg("--seed", type=int, default=7),
                arg(
                    "--rate",
                    type=positive,
                    default=1.0,
                    help="the sensor rates as a share of the papers' (ball 2000 Hz, legs 200 Hz); "
                    "0.1: ~1,100 tuples/s",
                ),
                arg(
                    "--part-s",
                    type=seconds,
                    help="generate and ingest in parts of this many seconds of arrival time (long replays)",
                ),
            ),
            writes=_BRONZE,
        ),
        Stage(
            "stats",
            "disorder statistics per source",
            f"{_C}:stats",
            args=(
                arg("--source", nargs="*", help="source ids (default: all in bronze)"),
                arg("--detail", action="store_true", help="also print per stream and per key"),
                arg("--json", help="also write the full figures (per stream, per key) here"),
            ),
            reads=("bronze/arrivals",),
        ),
        Stage(
            "validate-bronze",
            "Great Expectations over bronze",
            f"{_C}:validate_bronze",
            args=validation(
                arg("--warn-only", action="store_true", help="the same as --on-violation warn"),
                arg(
                    "--since",
                    help="only the ingests that finished from then on (µs or ISO 8601; default: all)",
                ),
                arg("--until", help="and before this time (with --since)"),
            ),
            reads=("bronze/arrivals", "bronze/ingest_log"),
            writes=("gold/quality_runs",),
        ),
    ),
    steps=(
        Step("ingest", "outoforder.stages.demo:ingest"),
        Step("replay", "outoforder.stages.demo:replay"),
        Step("stats", "outoforder.stages.demo:stats"),
        Step("bronze", "outoforder.stages.demo:bronze"),
    ),
)
