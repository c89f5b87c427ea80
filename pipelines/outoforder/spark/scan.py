"""Prefix computations over arrival order, in Spark tasks, partitioned by arrival-sequence range.

The stream operators' per-arrival state (stream progress, horizons, the close frontier) is a chain
of prefix maxima over the arrival order, seeded with the state carried from the previous interval.
:func:`carried_scan` computes such a chain on the executors:

- a batch of at most ``rows_per_task`` arrivals is one task: the kernel runs over it in arrival
  order, seeded with the carried state;
- a larger batch is cut into ranges of arrival sequence numbers, one task each. A range needs the
  state as it stands after the ranges before it (its *carry*). Each level of the chain is one
  pass: every task summarises its range given the carries of the levels below (a few numbers),
  the driver folds the summaries in range order into the next level's carries, and the last pass
  produces the rows. The driver sees a few numbers per range, never a row.

A kernel (:class:`ScanKernel`) is pure numpy over one range's columns, sorted by ``seq``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

Carry = dict[str, Any]
Columns = dict[str, np.ndarray[Any, Any]]

PART = "_scan_part"


class ScanKernel(Protocol):
    """The operator-specific part of a carried scan (pure numpy; see :func:`carried_scan`)."""

    level_keys: tuple[tuple[str, ...], ...]  # per level of the chain, the carry's keys it settles

    def summarize(self, level: int, cols: Columns, carry: Carry) -> Carry:
        """Level ``level``'s summary of one range, given the carries of the lower levels."""
        ...

    def fold(self, level: int, carry: Carry, summary: Carry) -> Carry:
        """The carry after a range, from the carry before it and the range's level summary."""
        ...

    def finish(self, cols: Columns, carry: Carry) -> Iterator[pa.RecordBatch]:
        """The output rows of one range, given the full carry before it."""
        ...


def _columns(batches: Iterator[pa.RecordBatch]) -> tuple[int, Columns]:
    received = list(batches)
    if not received:
        return -1, {}
    table = pa.Table.from_batches(received)
    part = int(table.column(PART)[0].as_py()) if PART in table.column_names else 0
    table = table.sort_by("seq")
    cols = {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}
    return part, cols


def carried_scan(
    df: DataFrame,
    kernel: ScanKernel,
    carry: Carry,
    schema: str,
    rows_per_task: int,
    rows: int,
    seq_bounds: tuple[int, int],
) -> DataFrame:
    """``kernel`` over ``df`` (column ``seq`` orders it) from ``carry``; lazy, one task per range.

    ``rows`` and ``seq_bounds`` (the batch's size and smallest and largest ``seq``) choose the
    ranges: ``ceil(rows / rows_per_task)`` of equal width.
    """
    parts = max(1, math.ceil(rows / max(rows_per_task, 1)))
    if parts == 1:
        return df.coalesce(1).mapInArrow(lambda it: _finish_one(it, kernel, carry), schema)
    lo, hi = seq_bounds
    width = (hi - lo) // parts + 1
    split = (
        df.withColumn(PART, F.floor((F.col("seq") - F.lit(lo)) / F.lit(width)).cast("long"))
        .repartitionByRange(parts, PART)
        .localCheckpoint()
    )
    carries: dict[int, Carry] = {p: dict(carry) for p in range(parts)}
    for level, keys in enumerate(kernel.level_keys):
        known = {p: dict(c) for p, c in carries.items()}
        summarize = functools.partial(_summarize, kernel=kernel, level=level, carries=known)
        rows_out = split.mapInArrow(summarize, "part long, summary string").collect()
        summaries = {int(r["part"]): json.loads(r["summary"]) for r in rows_out}
        for p in range(parts - 1):  # a range with no rows passes its carry on unchanged
            after = kernel.fold(level, carries[p], summaries[p]) if p in summaries else carries[p]
            carries[p + 1] |= {k: after[k] for k in keys}
    final = dict(carries)
    return split.mapInArrow(lambda it: _finish_many(it, kernel, final), schema)


def _summarize(
    it: Iterator[pa.RecordBatch], kernel: ScanKernel, level: int, carries: Mapping[int, Carry]
) -> Iterator[pa.RecordBatch]:
    part, cols = _columns(b for b in it if b.num_rows)
    if part < 0:
        return
    summary = kernel.summarize(level, cols, carries[part])
    yield pa.RecordBatch.from_pylist([{"part": part, "summary": json.dumps(summary)}])


def _finish_one(it: Iterator[pa.RecordBatch], kernel: ScanKernel, carry: Carry) -> Iterator[pa.RecordBatch]:
    _, cols = _columns(b for b in it if b.num_rows)
    yield from kernel.finish(cols, carry)


def _finish_many(
    it: Iterator[pa.RecordBatch], kernel: ScanKernel, carries: Mapping[int, Carry]
) -> Iterator[pa.RecordBatch]:
    part, cols = _columns(b for b in it if b.num_rows)
    if part < 0:
        return
    yield from kernel.finish(cols, carries[part])
