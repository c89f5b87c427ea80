"""Disorder statistics of a source on Spark: late tuples and delays per scope, in ranges of arrivals.

A tuple's delay is measured against the largest event time seen before it in its scope (the whole
source, its stream, its key: :mod:`outoforder.core.disorder`). That maximum is a prefix maximum over
the arrival order, so the arrivals are cut into ranges of ``arrival_seq`` and scanned by
:func:`outoforder.spark.scan.carried_scan`: each range's task learns each scope's maximum before it
(a few numbers per scope), measures its own tuples and returns partial statistics per scope. Spark
adds the partials up; the driver receives one row per scope, never a tuple.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from outoforder.core.disorder import DisorderStats, carried_delays, scope_maxima, stats_by
from outoforder.spark.rows import arrow_schema, one_row
from outoforder.spark.scan import Carry, Columns, carried_scan

KINDS = ("all", "stream", "key")  # the scopes statistics are kept for
PARTIALS = (
    "kind string, scope string, rows long, late long, max_delay_us long, sum_delay_us long, "
    "t_first_us long, t_last_us long"
)
ROWS_PER_TASK = 2_000_000


def _scopes(cols: Columns, kind: str) -> np.ndarray[Any, Any]:
    return np.full(cols["ts"].size, "", dtype=object) if kind == "all" else cols[kind]


class _Disorder:
    """The per-scope running maxima as a :class:`~outoforder.spark.scan.ScanKernel`."""

    level_keys: tuple[tuple[str, ...], ...] = (KINDS,)

    def summarize(self, level: int, cols: Columns, carry: Carry) -> Carry:
        return {kind: scope_maxima(cols["ts"], _scopes(cols, kind)) for kind in KINDS}

    def fold(self, level: int, carry: Carry, summary: Carry) -> Carry:
        out = {}
        for kind in KINDS:
            merged = dict(carry.get(kind) or {})
            for scope, top in summary[kind].items():
                merged[scope] = max(top, merged.get(scope, top))
            out[kind] = merged
        return out

    def finish(self, cols: Columns, carry: Carry) -> Iterator[pa.RecordBatch]:
        if not cols:
            return
        ts = cols["ts"].astype(np.int64)
        rows = []
        for kind in KINDS:
            scope = _scopes(cols, kind)
            delays = carried_delays(ts, scope, carry.get(kind) or {})
            for name, s in stats_by(ts, delays, scope).items():
                rows.append({"kind": kind, "scope": name, **s.to_dict()})
        yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema(PARTIALS))


def disorder_by_scope(
    df: DataFrame, rows_per_task: int = ROWS_PER_TASK
) -> dict[str, dict[str, DisorderStats]]:
    """``{kind: {scope: stats}}`` for ``df`` (columns ``seq``, ``ts``, ``stream``, ``key``).

    Kinds: ``all`` (one scope, ``""``), ``stream`` and ``key``. One job for the size, one per
    level of the scan when the arrivals need more than one task, one for the statistics.
    """
    size = one_row(df.agg(F.count("*").alias("n"), F.min("seq").alias("lo"), F.max("seq").alias("hi")))
    if not size["n"]:
        return {kind: {} for kind in KINDS}
    carry: Carry = {kind: {} for kind in KINDS}
    partials = carried_scan(
        df.select("seq", "ts", "stream", "key"), _Disorder(), carry, PARTIALS, rows_per_task, int(size["n"]),
        (int(size["lo"]), int(size["hi"])),
    )  # fmt: skip
    totals = partials.groupBy("kind", "scope").agg(
        F.sum("rows").alias("rows"), F.sum("late").alias("late"), F.max("max_delay_us").alias("max_delay_us"),
        F.sum("sum_delay_us").alias("sum_delay_us"), F.min("t_first_us").alias("t_first_us"),
        F.max("t_last_us").alias("t_last_us"),
    )  # fmt: skip
    out: dict[str, dict[str, DisorderStats]] = {kind: {} for kind in KINDS}
    for r in totals.collect():  # one row per scope
        first, last = int(r["t_first_us"]), int(r["t_last_us"])
        out[r["kind"]][r["scope"]] = DisorderStats(
            int(r["rows"]),
            int(r["late"]),
            int(r["max_delay_us"]),
            int(r["sum_delay_us"]),
            last - first,
            first,
            last,
        )
    return {kind: dict(sorted(v.items())) for kind, v in out.items()}
