"""What each validation judged, per period or window, kept for the quality report.

A validation replaces the job's rows of that measure in ``gold/quality_measures``: all of them after
judging the whole history, or only the items (periods, windows) it judged when it ran over one data
interval. Either is idempotent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

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
    settings: Settings,
    source: str,
    job: str,
    measure: str,
    before: int,
    count: int,
    after: int | None = None,
) -> list[tuple[int, float | None, bool]]:
    """The job's ``count`` latest ``measure`` items before ``before``: ``(item, value, met)``, oldest first.

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
        QUALITY_MEASURES, settings.lake_root, settings.storage, filters, columns=["item", "value", "met"]
    )
    rows = [] if got is None else got.to_pylist()
    return sorted((int(r["item"]), r["value"], bool(r["met"])) for r in rows)[-count:]


def with_latest_before(
    settings: Settings,
    source: str,
    job: str,
    measure: str,
    judged: pd.DataFrame,
    columns: tuple[str, str | None, str | None],
    at_least: int,
    after: int | None = None,
) -> pd.DataFrame:
    """A run's judged items after the job's latest ones before them: ``at_least`` rows in all.

    A target that is a share or a mean over windows is judged over enough of them: a run of a
    minute judges a few (top-k) to a few hundred overlapping ones (the aggregates), whose figure
    alone is mostly sampling noise. ``judged`` has a row per item; ``columns`` names its item
    column and the ones the measure's value and verdict fill (None: not wanted) in the earlier
    rows, read from ``gold/quality_measures`` without Spark. Only items after ``after`` (the last
    one a failed verdict judged: a miss is reported once). Fewer come back when the job has no
    more; none are added when the run judged nothing.
    """
    import pandas as pd

    item, value, met = columns
    missing = at_least - len(judged)
    if missing <= 0 or not len(judged):
        return judged
    earlier = latest_before(settings, source, job, measure, int(judged[item].min()), missing, after)
    if not earlier:
        return judged
    rows = pd.DataFrame(earlier, columns=[item, "_value", "_met"])
    keep: dict[str, pd.Series] = {item: rows[item].astype("int64")}
    if value is not None:
        keep[value] = rows["_value"].astype("float64")
    if met is not None:
        keep[met] = rows["_met"].astype(bool)
    before = pd.DataFrame(keep)
    return pd.concat([before, judged[list(keep)]], ignore_index=True)
