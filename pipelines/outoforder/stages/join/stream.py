"""The stream join as a pipeline stage: one pass per run over everything new, the retention adapted inside it.

``join-stream`` (:class:`JoinStream`, on the skeleton of :mod:`outoforder.stages.passes`) runs
QJoin adapting its retention every L (:class:`~outoforder.core.joins.adaptive.AdaptiveQJoin`)
over the bronze arrivals from where the job stands to the run's end, in one Spark task
(:func:`outoforder.spark.join_pass.join_pass`):

1. the operator's state (stream maxima, horizons, retention, the controller's marks and memory,
   and its kept arrivals: the buffered tuples and the history its decisions look at) comes from
   the newest snapshot in ``silver/join_state``;
2. every L of stream progress the controller decides (d_R, d_S) from what arrived before the
   decision (the robust estimator by default, :mod:`outoforder.core.joins.adaptation`); each
   decision goes to ``silver/join_params`` with its statistics;
3. result pairs go to ``gold/join_results`` with the retention and the decision that produced them;
4. the new snapshot is written last.

So the pairs, the decisions and the state do not depend on how often the scheduler runs the stage.
A *job* is one query and target (:class:`~outoforder.stages.join.spec.JoinJob`); its id is a
digest of them, so two joins of one source (say two targets) keep separate state and results.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from outoforder.core.joins.adaptive import ROW_COLUMNS
from outoforder.errors import InputError, StateError
from outoforder.io.tables import JOIN_PARAMS, JOIN_RESULTS, JOIN_STATE
from outoforder.stages.context import StageContext
from outoforder.stages.join.inputs import join_tuples
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.passes import (
    Computed,
    Pass,
    PassStage,
    PassSummary,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)

INITIAL_PARAMS_VERSION = -1
KEPT_SCHEMA = ", ".join(f"{c} {'double' if c in ('x', 'y') else 'long'}" for c in ROW_COLUMNS)


@dataclass(frozen=True, kw_only=True)
class JoinPassSummary(PassSummary):
    """What one run of the stream join did."""

    stage: ClassVar[str] = "join-stream"
    new_pairs: int
    total_pairs: int
    buffered: int
    late: int
    decisions: int
    d_r_us: int
    d_s_us: int
    params_version: int

    def figures(self) -> str:
        """Pairs, buffered tuples, the decisions and the retention in force at the end."""
        return (
            f"{self.new_pairs:,} new pairs ({self.total_pairs:,} so far), {self.buffered:,} buffered, "
            f"{self.late:,} late, {self.decisions} decisions, d = ({self.d_r_us / 1000:g}, "
            f"{self.d_s_us / 1000:g}) ms (params {self.params_version})"
        )


class JoinStream(PassStage[JoinJob, JoinPassSummary]):
    """QJoin, its retention adapted every L, one pass per run (see the module docstring)."""

    name = "join-stream"
    job_type = JoinJob
    what = "stream join"
    state_table = JOIN_STATE
    outputs = (JOIN_RESULTS, JOIN_PARAMS)
    counters = ("arrivals", "pairs")
    kinds: ClassVar[Mapping[str, tuple[str, ...]]] = {JOIN_RESULTS.name: ("p",), JOIN_PARAMS.name: ("d",)}
    error_kind = "e"
    seq_columns: ClassVar[Mapping[str, str]] = {
        JOIN_RESULTS.name: "emitted_at_seq",
        JOIN_PARAMS.name: "valid_from_seq",
    }
    stream_only = (JOIN_RESULTS.name,)
    summary_type = JoinPassSummary

    def streams(self) -> dict[str, tuple[str, ...]]:
        """R's and S's streams: a join with no row on either side would run green on nothing."""
        return {"R": self.job.r_streams, "S": self.job.s_streams}

    def compute(self, p: Pass) -> Computed:
        """The span's arrivals and the kept rows through the operator, in one task."""
        from outoforder.io import delta
        from outoforder.io.tables import BRONZE
        from outoforder.spark.join_pass import join_pass

        lake, job = self.settings.lake_root, self.job
        bronze = delta.read_arrivals(
            self.spark, BRONZE, lake, source=self.source, arrival_ts_range=(p.start_us, p.end_us)
        )
        kept = self.kept(p, ("row",), list(ROW_COLUMNS), KEPT_SCHEMA)
        scalars = None if p.position is None else p.position.scalars
        initial = job.initial_retention()
        out = join_pass(
            join_tuples(bronze, job), kept, job.query(), job.adaptation(), (initial, initial), scalars
        )
        return self.checkpointed(p, out)

    def refused(self, p: Pass, error: str) -> Exception:
        """Arrivals without a location are the input's fault; anything else, the state's."""
        import json

        e = json.loads(error)
        where = f"{self.source} in [{p.start_us}, {p.end_us})"
        if e.get("no_location"):
            msg = f"{e['no_location']:,} arrivals of {where} have no x/y: a distance join needs them"
            return InputError(msg)
        msg = f"the {self.what} of {where} cannot run ({self.jid}): {e.get('error')}"
        return StateError(msg)

    def output_rows(self, table: Table, c: Computed, p: Pass) -> DataFrame:
        """Result pairs (``p`` rows) or decisions (``d`` rows) of the pass."""
        from pyspark.sql import functions as F

        lit = [F.lit(self.source).alias("source"), F.lit(self.jid).alias("job")]
        rows = c.out.where(F.col("kind").isin(*self.kinds[table.name]))
        if table is JOIN_RESULTS:
            return rows.select(
                *lit, F.col("seq").alias("r_seq"), F.col("seq2").alias("s_seq"), F.col("ts").alias("r_ts"),
                F.col("ts2").alias("s_ts"), F.col("at_seq").alias("emitted_at_seq"),
                F.col("at_us").alias("emitted_at_us"), F.lit("stream").alias("produced_by"),
                F.col("d_r").alias("d_r_us"), F.col("d_s").alias("d_s_us"),
                F.col("version").alias("params_version"),
                F.lit(p.now_us).cast("long").alias("written_at_us"),
            )  # fmt: skip
        job = self.job
        return rows.select(
            *lit, F.col("at_seq").alias("valid_from_seq"), F.col("at_us").alias("valid_from_us"),
            F.col("progress").alias("progress_us"), F.lit(job.estimator).alias("estimator"),
            F.lit(float(job.q_user)).alias("q_user"), "q_l", F.col("d_r").alias("d_r_us"),
            F.col("d_s").alias("d_s_us"), F.col("est").alias("estimated_q"),
            F.col("text").alias("stats_json"),
            F.lit(p.now_us).cast("long").alias("computed_at_us"),
        )  # fmt: skip

    def state_rows(self, c: Computed, p: Pass, row: Mapping[str, Any]) -> DataFrame:
        """The state row and the operator's kept arrivals (``r`` rows), as of the pass's end."""
        from pyspark.sql import functions as F

        names = JOIN_STATE.schema.fieldNames()
        head = self.spark.createDataFrame([tuple(row.get(n) for n in names)], JOIN_STATE.schema)
        kept = c.out.where(F.col("kind") == "r").select(
            F.lit(self.source).alias("source"), F.lit(self.jid).alias("job"),
            F.lit(p.end_us).cast("long").alias("as_of_us"), F.lit("row").alias("kind"), *ROW_COLUMNS,
        )  # fmt: skip
        return head.unionByName(kept, allowMissingColumns=True)

    def summary(self, p: Pass, c: Computed, seconds: float) -> JoinPassSummary:
        """The pass's figures (from its state row)."""
        f = c.state["figures"]
        before = 0 if p.position is None else int(p.position.counters.get("pairs", 0))
        buffered = f.get("buffered") or [0, 0]
        d = f.get("d") or [0, 0]
        return JoinPassSummary(
            source=self.source, job=self.jid, start_us=p.start_us, end_us=p.end_us,
            arrivals=int(f["arrivals"]), state_rows=int(f["kept"]), seconds=seconds,
            new_pairs=int(f["pairs"]), total_pairs=before + int(f["pairs"]), buffered=int(sum(buffered)),
            late=int(f["late"]), decisions=int(f["decisions"]), d_r_us=int(d[0]), d_s_us=int(d[1]),
            params_version=int(f["version"]),
        )  # fmt: skip


def run_pass(
    ctx: StageContext, start_us: int | None = None, end_us: int | None = None
) -> JoinPassSummary | None:
    """One pass of the stream join (see :class:`JoinStream`)."""
    return JoinStream(ctx).run(start_us, end_us)
