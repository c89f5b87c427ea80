"""Disorder-statistics stage: late fraction, mean and max delay per source, from bronze.

Uses the definitions of the data READMEs (:mod:`outoforder.core.disorder`): arrival order is
``arrival_seq``; figures are computed for the whole source ("overall"), per stream, and per key
(sensor / device / taxi), so they can be compared line by line with the data folders' statistics.
The work runs in Spark tasks over ranges of arrivals (:mod:`outoforder.spark.disorder`); the driver
receives one row per scope.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from outoforder.config import Settings
from outoforder.core.disorder import disorder_stats
from outoforder.io import delta
from outoforder.io.tables import BRONZE


def source_stats(spark: SparkSession, settings: Settings, source: str) -> dict[str, Any]:
    """Disorder of one bronze source: overall, per stream and per key."""
    from outoforder.spark.disorder import disorder_by_scope

    arrivals = delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source).select(
        F.col("arrival_seq").alias("seq"), F.col("event_ts").alias("ts"), "stream", "key"
    )
    scopes = disorder_by_scope(arrivals)
    per_key, per_stream = scopes["key"], scopes["stream"]
    overall = scopes["all"].get("", disorder_stats([]))
    late_keys = [s for s in per_key.values() if s.late]
    return {
        "source": source,
        "overall": overall.as_report(),
        "per_stream": {k: v.as_report() for k, v in per_stream.items()},
        "n_keys": len(per_key),
        "per_key": {k: v.as_report() for k, v in per_key.items()},
        "per_key_summary": {
            "keys_with_late": len(late_keys),
            "max_late_frac": max((s.late_frac for s in per_key.values()), default=0.0),
            "max_max_delay": max((s.max_delay_us for s in per_key.values()), default=0) / 1e6,
        },
    }


def all_sources(spark: SparkSession, settings: Settings) -> list[str]:
    """Source ids present in bronze, sorted."""
    rows = delta.read(spark, BRONZE, settings.lake_root).select("source").distinct().collect()
    return sorted(r["source"] for r in rows)


def format_table(results: list[dict[str, Any]], detail: bool = False) -> str:
    """A fixed-width table of the overall figures, one line per source.

    With ``detail``, each source is followed by its streams and keys, indented.
    """
    head = (
        f"{'source':<28} {'rows':>9} {'late':>9} {'late %':>7} {'max delay s':>12} "
        f"{'mean late ms':>13} {'span s':>9}"
    )
    lines = [head, "-" * len(head)]

    def row(name: str, o: dict[str, Any]) -> str:
        return (
            f"{name:<28} {o['rows']:>9,} {o['late']:>9,} {100 * o['late_frac']:>6.2f}% "
            f"{o['max_delay']:>12.3f} {1000 * o['mean_delay_late']:>13.1f} {o['span']:>9.1f}"
        )

    for r in results:
        lines.append(row(r["source"], r["overall"]))
        if detail:
            lines += [row(f"  stream {k}", v) for k, v in r["per_stream"].items()]
            lines += [row(f"    key {k}", v) for k, v in r["per_key"].items()]
    return "\n".join(lines)
