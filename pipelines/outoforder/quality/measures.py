"""What each validation judged, per period or window, kept for the quality report.

Validations recompute their judgement over the whole history each time, so every call replaces the
job's rows of that measure (idempotent) in ``gold/quality_measures``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# (item, start_us, end_us, value or None, target, met)
Measure = tuple[int, int, int, float | None, float, bool]

MEASURES = {
    "join_recall": "recall of the stream join per period (share of the exact join's pairs it found)",
    "agg_error": "relative error of each window's aggregate when it was emitted",
    "topk_hit_rate": "share of each closed window's exact top-k in the emitted list",
}


def record_measures(
    spark: SparkSession,
    settings: Settings,
    source: str,
    job: str,
    measure: str,
    rows: Sequence[Measure],
) -> None:
    """Replace the job's ``measure`` rows with ``rows``."""
    from outoforder.io import delta
    from outoforder.io.tables import QUALITY_MEASURES

    if measure not in MEASURES:
        msg = f"unknown measure {measure!r} (known: {', '.join(MEASURES)})"
        raise ConfigError(msg)
    at = int(time.time() * 1e6)
    frame = spark.createDataFrame([(source, job, measure, *r, at) for r in rows], QUALITY_MEASURES.schema)
    delta.replace_where(
        frame, QUALITY_MEASURES, settings.lake_root, {"source": source, "job": job, "measure": measure}
    )
