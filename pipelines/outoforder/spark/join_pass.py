"""The stream join's pass on Spark: QJoin adapting every L over a whole span of arrivals, in one task.

A pass of the join stage (:mod:`outoforder.stages.join.stream`) hands one Spark task the rows the
operator carries (:data:`~outoforder.core.joins.adaptive.ROW_COLUMNS`: the buffered tuples and
the history its decisions look at) and the span's new arrivals, all in arrival order. The task
restores :class:`~outoforder.core.joins.adaptive.AdaptiveQJoin` and feeds it the arrivals in
chunks of :data:`CHUNK_ROWS`; the operator decides the retention at its own cadence inside them,
so the result does not depend on the chunks nor on the spans the scheduler cuts. Out of the task
come, in one wide schema whose ``kind`` says what a row is (:data:`PASS_SCHEMA`):

- ``p``: a result pair (``seq``/``seq2`` = r/s arrival seqs, ``ts``/``ts2`` their event times,
  ``at_seq``/``at_us`` the arrival that emitted it and its arrival time, the retention
  ``d_r``/``d_s`` in force and its ``version``);
- ``d``: a decision (from ``at_seq``, arrival time ``at_us``; ``progress``, ``q_l``, ``d_r``,
  ``d_s``, ``est`` and the statistics as JSON in ``text``);
- ``r``: a row of the new state (the operator's kept arrivals);
- ``s``: the pass's figures and the operator's scalars (JSON in ``text``), one row; beside the
  operator's own, the scalars carry :data:`ORIGIN`, the earliest event time of the job's tuples so
  far, from which the checks count periods (so that a job's first check need not scan its history);
- ``e``: what makes the pass unusable (arrivals out of arrival order, tuples without a location
  under a distance join): the driver raises it before anything is written.

Why one task: the controller's decisions depend on what the join produced before them, so a job's
pass is sequential in arrival order. Jobs (and sources) are independent: on a cluster their passes
run side by side (docs/architecture.md, "Where the work runs").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from outoforder.core.joins.adaptation import AdaptationSettings
from outoforder.core.joins.adaptive import ROW_COLUMNS, AdaptiveQJoin, AdaptiveState
from outoforder.core.joins.query import JoinInput, JoinQuery
from outoforder.errors import ConfigError

# arrivals per call of the operator: each call joins its chunk with the history the operator
# keeps, so chunks much smaller than the history repeat that work
CHUNK_ROWS = 250_000
ORIGIN = "origin_us"  # the key of the earliest event time seen, in the state row's scalars

PASS_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("seq", pa.int64()),
        ("seq2", pa.int64()),
        ("ts", pa.int64()),
        ("ts2", pa.int64()),
        ("at_seq", pa.int64()),
        ("at_us", pa.int64()),
        ("d_r", pa.int64()),
        ("d_s", pa.int64()),
        ("version", pa.int64()),
        ("side", pa.int64()),
        ("x", pa.float64()),
        ("y", pa.float64()),
        ("key", pa.int64()),
        ("t", pa.int64()),
        ("delay", pa.int64()),
        ("h_partner", pa.int64()),
        ("progress", pa.int64()),
        ("q_l", pa.float64()),
        ("est", pa.float64()),
        ("text", pa.string()),
    ]
)
INPUT_COLUMNS = (*ROW_COLUMNS, "arrival_ts", "no_location", "kept")


def _batch(kind: str, n: int, **cols: Any) -> pa.RecordBatch:
    arrays = []
    for field in PASS_SCHEMA:
        if field.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif field.name in cols:
            arrays.append(pa.array(cols[field.name], field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=PASS_SCHEMA)


class _Pass:
    """The task's loop: kept rows first, then the new arrivals in chunks."""

    def __init__(
        self,
        query: JoinQuery,
        settings: AdaptationSettings,
        initial_us: tuple[int, int],
        scalars: str | None,
        distance: bool,
    ) -> None:
        self.query, self.settings, self.initial_us = query, settings, initial_us
        self.scalars = None if scalars is None else json.loads(scalars)
        self.distance = distance
        self.kept: list[pa.RecordBatch] = []
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.op: AdaptiveQJoin | None = None
        self.figures: dict[str, Any] = {
            "arrivals": 0,
            "pairs": 0,
            "late": 0,
            "decisions": 0,
            "no_location": 0,
        }
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.error: str | None = None
        # the earliest event time the job has seen: its periods count from there (the checks')
        self.origin_us: int | None = None if self.scalars is None else self.scalars.get(ORIGIN)

    def operator(self) -> AdaptiveQJoin:
        if self.op is None:
            if self.scalars is None:
                self.op = AdaptiveQJoin(self.query, self.settings, self.initial_us)
            else:
                rows = pa.Table.from_batches(self.kept) if self.kept else None
                cols = {
                    c: (rows.column(c).to_numpy() if rows is not None else np.zeros(0)) for c in ROW_COLUMNS
                }
                self.op = AdaptiveQJoin(self.query, self.settings, state=AdaptiveState.of(self.scalars, cols))
            self.kept = []
        return self.op

    def feed(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        kept = batch.column("kept").to_numpy(zero_copy_only=False).astype(bool)
        if kept.any():
            if self.op is not None or not kept[: int(kept.sum())].all():
                self.error = (
                    "the operator's kept rows come after new arrivals: arrival order and time disagree"
                )
            self.kept.append(batch.filter(pa.array(kept)))
        new = batch.filter(pa.array(~kept)) if kept.any() else batch
        if new.num_rows == 0:
            return
        if self.distance:
            missing = int(np.asarray(new.column("no_location").to_numpy(zero_copy_only=False), bool).sum())
            self.figures["no_location"] += missing
        if self.figures["no_location"] or self.error:
            return
        self.pending.append(new)
        self.pending_rows += new.num_rows
        if self.pending_rows >= CHUNK_ROWS:
            yield from self.flush()

    def flush(self) -> Iterator[pa.RecordBatch]:
        if not self.pending or self.figures["no_location"] or self.error:
            return
        chunk = pa.Table.from_batches(self.pending)
        self.pending, self.pending_rows = [], 0
        col = {c: chunk.column(c).to_numpy() for c in ("seq", "side", "ts", "x", "y", "key", "arrival_ts")}
        op = self.operator()
        try:
            out = op.process(col["seq"], JoinInput(col["side"], col["ts"], col["x"], col["y"], col["key"]))
        except ConfigError as e:  # ids out of order: the driver names it
            self.error = str(e)
            return
        seqs, arrived = col["seq"], col["arrival_ts"]
        if self.first_seq is None:
            self.first_seq = int(seqs[0])
        earliest = int(col["ts"].min())
        self.origin_us = earliest if self.origin_us is None else min(self.origin_us, earliest)
        self.last_seq = int(seqs[-1])
        n = int(out.pairs.shape[0])
        self.figures["arrivals"] += int(seqs.size)
        self.figures["pairs"] += n
        self.figures["late"] += int(out.late.size)
        self.figures["decisions"] += len(out.decisions)
        if n:
            at = out.emitted_at
            yield _batch(
                "p",
                n,
                seq=out.pairs[:, 0],
                seq2=out.pairs[:, 1],
                ts=out.pair_ts[:, 0],
                ts2=out.pair_ts[:, 1],
                at_seq=at,
                at_us=arrived[np.searchsorted(seqs, at)],
                d_r=out.pair_d[:, 0],
                d_s=out.pair_d[:, 1],
                version=out.pair_version,
            )
        if out.decisions:
            at = np.array([a.at_index for a in out.decisions], np.int64)
            yield _batch(
                "d",
                len(out.decisions),
                at_seq=at,
                at_us=arrived[np.searchsorted(seqs, at)],
                progress=[a.progress_us for a in out.decisions],
                q_l=[a.q_l for a in out.decisions],
                d_r=[a.d_r_us for a in out.decisions],
                d_s=[a.d_s_us for a in out.decisions],
                est=[a.estimated_q for a in out.decisions],
                text=[json.dumps(a.stats, sort_keys=True) for a in out.decisions],
            )

    def finish(self) -> Iterator[pa.RecordBatch]:
        yield from self.flush()
        if self.error or self.figures["no_location"]:
            yield _batch("e", 1, text=[json.dumps({"error": self.error, **self.figures})])
            return
        st = self.operator().state
        rows = st.rows
        if rows["seq"].size:
            yield _batch("r", int(rows["seq"].size), **{c: rows[c] for c in ROW_COLUMNS})
        figures = {
            **self.figures,
            "rows": {"p": self.figures["pairs"], "d": self.figures["decisions"], "r": int(rows["seq"].size)},
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "kept": st.kept,
            "buffered": list(st.buffered()),
            "d": list(st.d),
            "version": st.version,
        }
        scalars = {**st.scalars(), ORIGIN: self.origin_us}
        yield _batch("s", 1, text=[json.dumps({"scalars": scalars, "figures": figures})])


def _task(
    batches: Iterator[pa.RecordBatch],
    query: JoinQuery,
    settings: AdaptationSettings,
    initial_us: tuple[int, int],
    scalars: str | None,
) -> Iterator[pa.RecordBatch]:
    run = _Pass(query, settings, initial_us, scalars, query.predicate == "distance")
    for b in batches:
        yield from run.feed(b)
    yield from run.finish()


def join_pass(
    arrivals: DataFrame,
    kept: DataFrame | None,
    query: JoinQuery,
    settings: AdaptationSettings,
    initial_us: tuple[int, int],
    scalars: str | None,
) -> DataFrame:
    """The pass's output rows (:data:`PASS_SCHEMA`).

    ``arrivals``: the span's tuples (seq, side, ts, x, y, key, arrival_ts, no_location);
    ``kept``: the operator's rows as of the span's start (:data:`ROW_COLUMNS`; None on the job's
    first pass, with ``scalars`` None too).
    """
    new = arrivals.select(
        "seq",
        "side",
        "ts",
        "x",
        "y",
        "key",
        *(F.lit(None).cast("long").alias(c) for c in ("t", "delay", "h_partner")),
        "arrival_ts",
        "no_location",
        F.lit(False).alias("kept"),
    )
    both = new
    if kept is not None:
        both = new.unionByName(
            kept.select(
                *ROW_COLUMNS,
                F.lit(None).cast("long").alias("arrival_ts"),
                F.lit(False).alias("no_location"),
                F.lit(True).alias("kept"),
            )
        )
    task = functools.partial(_task, query=query, settings=settings, initial_us=initial_us, scalars=scalars)
    return (
        both.repartition(1)
        .sortWithinPartitions("seq")
        .mapInArrow(lambda it: task(it), from_arrow_schema(PASS_SCHEMA))
    )
