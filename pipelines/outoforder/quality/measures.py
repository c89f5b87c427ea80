"""What each validation judged, per period or window, kept for the quality report.

A validation replaces the job's rows of that measure in ``gold/quality_measures``: all of them after
judging the whole history, or only the items (periods, windows) it judged when it ran over one data
interval. Either is idempotent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from outoforder.config import Settings
from outoforder.errors import ConfigError

# (item, start_us, end_us, value or None, target, met)
Measure = tuple[int, int, int, float | None, float, bool]

MEASURES = {
    "join_recall": "recall of the stream join per period (share of the exact join's pairs it found)",
    "agg_error": "relative error of each window's aggregate when it was emitted",
    "topk_hit_rate": "share of each closed window's exact top-k in the emitted list",
}


def record_measures(
    settings: Settings,
    source: str,
    job: str,
    measure: str,
    rows: Sequence[Measure],
    items: tuple[int, int] | None = None,
) -> None:
    """Replace the job's ``measure`` rows with ``rows``: all of them, or those of ``items`` (inclusive).

    Written on the driver (:func:`outoforder.io.deltars.replace_rows`): no Spark job.
    """
    from outoforder.io import deltars
    from outoforder.io.tables import QUALITY_MEASURES

    if measure not in MEASURES:
        msg = f"unknown measure {measure!r} (known: {', '.join(MEASURES)})"
        raise ConfigError(msg)
    at = int(time.time() * 1e6)
    between = None if items is None else ("item", items[0], items[1] + 1)
    deltars.replace_rows(
        QUALITY_MEASURES,
        settings.lake_root,
        settings.storage,
        [(source, job, measure, *r, at) for r in rows],
        {"source": source, "job": job, "measure": measure},
        between,
    )


def latest_before(
    settings: Settings, source: str, job: str, measure: str, before: int, count: int, after: int | None = None
) -> list[tuple[int, bool]]:
    """The job's ``count`` latest ``measure`` items before item ``before``: ``(item, met)``, oldest first.

    Only items after ``after`` when given. Fewer come back when the job has no more. Read on the
    driver, over that range of items only.
    """
    from outoforder.io import deltars
    from outoforder.io.tables import QUALITY_MEASURES

    if count <= 0:
        return []
    filters = [
        ("source", "=", source), ("job", "=", job), ("measure", "=", measure),
        ("item", ">=", before - count if after is None else max(before - count, after + 1)),
        ("item", "<", before),
    ]  # fmt: skip
    got = deltars.read_table(
        QUALITY_MEASURES, settings.lake_root, settings.storage, filters, columns=["item", "met"]
    )
    rows = [] if got is None else got.to_pylist()
    return sorted((int(r["item"]), bool(r["met"])) for r in rows)[-count:]
