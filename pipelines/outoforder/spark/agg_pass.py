"""The aggregates' pass on Spark: HPM over a whole span of arrivals in one task, its K adapted per window.

A pass of the aggregate stage (:mod:`outoforder.stages.aggregate.stream`) hands one Spark task the
operator's kept rows (the values of the windows still open, the closed windows whose coverage is
not observed yet) and the span's new arrivals, in arrival order. The task restores
:class:`~outoforder.core.windows.hpm.HPM` with ``"arrival"`` control: the policy (the lateness
controller, or HPM's PD controller of α) sees every window's coverage observation as it happens,
so K follows the stream at its own cadence and the outputs do not depend on how the scheduler
cut the stream into passes. Out of the task come, in one wide schema whose ``kind`` says what a row
is (:data:`PASS_SCHEMA`):

- ``e``: an emitted window (``wid``, ``value``, ``n_rcv``, the arrival that closed it ``at_seq`` /
  ``at_us``, the K in force ``slack``, ``lag`` = t_max − end, ``lambda_thr``);
- ``l``: a late membership (the tuple ``seq``, its event time ``ts``, ``wid``, its arrival time
  ``at_us``);
- ``o``: a coverage observation (``wid``, at ``at_seq``/``at_us``, ``n_rcv``, ``n_late``,
  ``lambda_thr``, the K it ``needed``, the K ``slack`` once the policy has seen it);
- ``m``, ``w``: the new state's rows (an open window's value with its lateness ``bucket``; a
  watched window with its lateness profile as JSON in ``text``);
- ``s``: the pass's figures and the operator's scalars (JSON in ``text``);
- ``x``: arrivals out of arrival order: the driver raises it before anything is written.

The operator runs tuple at a time (about 15 µs an arrival here): a job's pass is sequential in
arrival order, since every emission depends on the K the observations before it set. Jobs and
sources are independent and run side by side on a cluster.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from outoforder.core.joins.progress import NEG
from outoforder.core.protocol import Arrival
from outoforder.core.windows.buffered import WindowQuery
from outoforder.core.windows.hpm import HPM
from outoforder.core.windows.slack import HPMSlack, LatenessSlack, SlackPolicy

PASS_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("wid", pa.int64()),
        ("seq", pa.int64()),
        ("ts", pa.int64()),
        ("v", pa.float64()),
        ("bucket", pa.int64()),
        ("at_seq", pa.int64()),
        ("at_us", pa.int64()),
        ("n_rcv", pa.int64()),
        ("n_late", pa.int64()),
        ("slack", pa.int64()),
        ("lag", pa.int64()),
        ("needed", pa.int64()),
        ("lambda_thr", pa.float64()),
        ("text", pa.string()),
    ]
)
# the operator's scalars: the HPM snapshot without its open and watched windows (rows of their own)
ROWS_OF_SNAPSHOT = ("open", "watched")


def _batch(kind: str, n: int, **cols: Any) -> pa.RecordBatch:
    arrays = []
    for f in PASS_SCHEMA:
        if f.name == "kind":
            arrays.append(pa.array([kind] * n, pa.string()))
        elif f.name in cols:
            arrays.append(pa.array(cols[f.name], f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=PASS_SCHEMA)


class _Pass:
    """The task's loop: the kept rows, then the new arrivals through the operator."""

    def __init__(
        self, query: WindowQuery, policy: SlackPolicy, shadow: LatenessSlack | None, scalars: str | None
    ) -> None:
        self.op = HPM(query, policy, control="arrival")
        self.policy, self.shadow = policy, shadow
        self.scalars = None if scalars is None else json.loads(scalars)
        self.open: dict[int, tuple[list[float], list[int]]] = {}
        self.watched: list[list[Any]] = []
        self.restored = self.scalars is None
        if self.scalars is not None and self.scalars.get("last_seq") is not None:
            self.last_seq: int | None = int(self.scalars["last_seq"])
        else:
            self.last_seq = None
        self.figures: dict[str, Any] = {
            "arrivals": 0,
            "unvalued": 0,
            "emitted": 0,
            "late": 0,
            "observed": 0,
            "slack_sum": 0.0,
        }
        self.error: str | None = None

    def _restore(self) -> None:
        if self.restored:
            return
        assert self.scalars is not None
        snap = dict(self.scalars["operator"])
        snap["open"] = [[w, vals, buckets] for w, (vals, buckets) in sorted(self.open.items())]
        snap["watched"] = sorted(self.watched, key=lambda r: r[0])
        self.op.restore(snap)
        if self.shadow is not None and self.scalars.get("shadow") is not None:
            self.shadow.restore(self.scalars["shadow"])
        self.restored = True

    def feed(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        kind = batch.column("kind").to_pylist()
        if not self.restored and any(k != "a" for k in kind):
            c = {
                n: batch.column(n).to_pylist()
                for n in ("wid", "v", "bucket", "n_rcv", "n_late", "lambda_thr", "text")
            }
            for i, k in enumerate(kind):
                if k == "m":
                    vals, buckets = self.open.setdefault(int(c["wid"][i]), ([], []))
                    vals.append(float(c["v"][i]))
                    buckets.append(int(c["bucket"][i]))
                elif k == "w":
                    self.watched.append(
                        [
                            int(c["wid"][i]),
                            float(c["n_rcv"][i]),
                            float(c["n_late"][i]),
                            float(c["lambda_thr"][i]),
                            json.loads(c["text"][i]),
                        ]
                    )
        new = batch.filter(pc.equal(batch.column("kind"), "a"))
        if new.num_rows == 0 or self.error:
            return
        self._restore()
        seq = new.column("seq").to_numpy()
        if self.last_seq is not None and seq[0] <= self.last_seq:
            self.error = f"arrival {int(seq[0])} comes after {self.last_seq}: arrival order and time disagree"
            return
        self.last_seq = int(seq[-1])
        ts = new.column("ts").to_numpy()
        at = new.column("at_us").to_numpy()
        v = new.column("v").to_numpy(zero_copy_only=False)
        valued = ~np.isnan(v)
        self.figures["unvalued"] += int((~valued).sum())
        keep = np.flatnonzero(valued)
        base = self.op.index
        out = self.op.process([Arrival(int(seq[j]), int(ts[j]), float(v[j])) for j in keep])
        self.figures["arrivals"] += int(keep.size)
        self.figures["slack_sum"] += float(sum(out.slack))
        idx = keep  # the operator's index base + i is the batch's arrival keep[i]

        def where(index: int) -> int:
            return int(idx[index - base])

        if out.emitted:
            e = out.emitted
            rows = [where(x.emitted_at) for x in e]
            self.figures["emitted"] += len(e)
            yield _batch(
                "e",
                len(e),
                wid=[x.window_id for x in e],
                v=[x.value for x in e],
                n_rcv=[x.received for x in e],
                at_seq=seq[rows],
                at_us=at[rows],
                slack=[x.slack_us for x in e],
                lag=[x.lag_us for x in e],
                lambda_thr=[x.lambda_thr for x in e],
            )
        if out.late:
            late = out.late
            pos = np.searchsorted(seq, [x.id for x in late])
            self.figures["late"] += len(late)
            yield _batch(
                "l",
                len(late),
                seq=[x.id for x in late],
                ts=[x.ts for x in late],
                wid=[x.window for x in late],
                at_us=at[pos],
            )
        if out.observations:
            obs = out.observations
            rows = [where(o.at) for o in obs]
            self.figures["observed"] += len(obs)
            if self.shadow is not None:
                for o in obs:
                    self.shadow.observe_window(o.coverage, o.lambda_thr, o.needed_us)
            yield _batch(
                "o",
                len(obs),
                wid=[o.window_id for o in obs],
                at_seq=seq[rows],
                at_us=at[rows],
                n_rcv=[o.received for o in obs],
                n_late=[o.late for o in obs],
                lambda_thr=[o.lambda_thr for o in obs],
                needed=[o.needed_us for o in obs],
                slack=[o.slack_after_us for o in obs],
            )

    def finish(self) -> Iterator[pa.RecordBatch]:
        if self.error:
            yield _batch("x", 1, text=[self.error])
            return
        self._restore()
        snap = self.op.snapshot()
        # in window order: a restored operator holds its windows in another order than one that ran on
        opened = sorted(snap["open"], key=lambda r: r[0])
        # kept rows carry their order in ``seq``: a window's values are summed in the order received
        if opened:
            wids = [w for w, vals, _ in opened for _ in vals]
            yield _batch(
                "m",
                len(wids),
                wid=wids,
                v=[x for _, vals, _ in opened for x in vals],
                bucket=[b for _, _, bs in opened for b in bs],
                seq=np.arange(len(wids)),
            )
        watched = sorted(snap["watched"], key=lambda r: r[0])
        if watched:
            yield _batch(
                "w",
                len(watched),
                wid=[r[0] for r in watched],
                n_rcv=[int(r[1]) for r in watched],
                n_late=[int(r[2]) for r in watched],
                lambda_thr=[r[3] for r in watched],
                text=[json.dumps(r[4]) for r in watched],
                seq=np.arange(len(watched)),
            )
        statement = self.shadow if self.shadow is not None else self.policy
        k_next = self.policy.slack(self.op.k)
        n_open = sum(len(vals) for _, vals, _ in opened)
        figures = {
            **self.figures,
            "rows": {
                "e": self.figures["emitted"],
                "l": self.figures["late"],
                "o": self.figures["observed"],
                "m": n_open,
                "w": len(watched),
            },
            "kept": n_open + len(watched),
            "last_seq": self.last_seq,
            "k": self.op.k,
            "slack_next_us": k_next,
            "alpha": self.policy.state.alpha
            if isinstance(self.policy, HPMSlack)
            else _ratio(k_next, self.op.k),
            "needed_us": getattr(statement, "needed_us", None),
            "reachable": getattr(statement, "reachable", None),
            "frontier": None if self.op.frontier == NEG else self.op.frontier,
        }
        scalars = {
            "operator": {k: v for k, v in snap.items() if k not in ROWS_OF_SNAPSHOT},
            "shadow": None if self.shadow is None else self.shadow.snapshot(),
            "last_seq": self.last_seq,
        }
        yield _batch("s", 1, text=[json.dumps({"scalars": scalars, "figures": figures})])


def _ratio(k_us: int, k: int) -> float:
    return 0.0 if k <= 0 else k_us / k


def _task(batches: Iterator[pa.RecordBatch], job: Any, scalars: str | None) -> Iterator[pa.RecordBatch]:
    lateness = job.lateness()
    policy: SlackPolicy = lateness
    shadow = None
    if job.controller == "paper":
        policy, shadow = HPMSlack(job.pd_controller()), lateness
    run = _Pass(job.query(), policy, shadow, scalars)
    for b in batches:
        yield from run.feed(b)
    yield from run.finish()


def agg_pass(arrivals: DataFrame, kept: DataFrame | None, job: Any, scalars: str | None) -> DataFrame:
    """The pass's output rows (:data:`PASS_SCHEMA`).

    ``arrivals``: the span's tuples of the job's streams (seq, ts, v: NaN when without a value,
    arrival_ts); ``kept``: the state's rows (kind ``m``/``w`` in :data:`PASS_SCHEMA`'s columns; None
    on the job's first pass, with ``scalars`` None too). ``job``: the
    :class:`~outoforder.stages.aggregate.spec.AggJob`.
    """
    spark_schema = from_arrow_schema(PASS_SCHEMA)
    given = {
        "kind": F.lit("a"), "seq": F.col("seq"), "ts": F.col("ts"),
        "v": F.coalesce(F.col("v"), F.lit(math.nan)), "at_us": F.col("arrival_ts"),
    }  # fmt: skip
    new = arrivals.select(
        *(given.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in spark_schema.fields)
    )
    both = new if kept is None else kept.select(*spark_schema.fieldNames()).unionByName(new)
    task = functools.partial(_task, job=job, scalars=scalars)
    # the kept rows first, in their own order, then the arrivals in arrival order
    order: list[Column | str] = [F.when(F.col("kind") == "a", 1).otherwise(0), "seq"]
    return both.repartition(1).sortWithinPartitions(*order).mapInArrow(lambda it: task(it), spark_schema)


def kept_rows(state: DataFrame) -> DataFrame:
    """The state table's rows of a snapshot as the pass's kept rows (kinds ``m`` and ``w``)."""
    given = {
        "kind": F.when(F.col("kind") == "open", F.lit("m")).otherwise(F.lit("w")),
        "seq": F.col("ord"),
        "text": F.col("profile"),
        **{c: F.col(c) for c in ("wid", "v", "bucket", "n_rcv", "n_late", "lambda_thr")},
    }
    fields = from_arrow_schema(PASS_SCHEMA).fields
    return state.select(*(given.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in fields))
