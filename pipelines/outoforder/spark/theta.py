"""θ-joins ``R.a θ S.b`` of two windowed datasets on Spark: FastThetaJoin and its baselines.

Every method takes the same inputs (two DataFrames with disjoint column names, the join column of
each, a :class:`~outoforder.core.theta.plan.Theta`) and returns a :class:`ThetaResult`: the joined
rows as a lazy DataFrame (every column of both sides) and the run's counters. Rows whose join
value is null or NaN never match (Spark orders NaN above every number, so they are dropped first).

- ``fast``: FastThetaJoin (docs/theta.md). One job collects per side the rows, min, max and a
  quantile sample of the join values; the driver applies the cross filter to the ranges, chooses
  the range partitions (equal widths, or quantiles where values are skewed; as few as the size
  needs) and keeps the partition pairs whose ranges can satisfy θ
  (:mod:`outoforder.core.theta.plan`). In the second job every row is sent to the pairs its
  partition is in. A *full* pair is every combination, with no test, in the JVM (an explode of
  the broadcast S partitions, or an equi-join on the pair number); a *partial* pair of an
  inequality is an equi-join on the pair number that tests θ, in the JVM; a *partial* pair of
  ``=`` or a band is joined in Arrow on the executors, by sorting
  (:mod:`outoforder.core.theta.sortjoin`), at a cost in proportion to its input and output.
- ``cfs``: CFS (Liu et al. 2017): a global sort of both sides, the min/max cross filter, then
  1-Bucket-Theta on what is left.
- ``one-bucket``: 1-Bucket-Theta (Okcan & Riedewald 2011): the |R|×|S| matrix cut into r×c
  regions; each R row goes to a random row of regions, each S row to a random column; every region
  tests θ on all its pairs.
- ``spark-sql``: Spark's own plan for the non-equi join (a broadcast nested loop join here).
- ``cross``: DirectCrossProduct: the shuffled Cartesian product, θ tested on every pair.

The θ column expression and the counters are shared; the plan and the pair join are pure numpy
in :mod:`outoforder.core.theta`, tested against the brute-force oracle.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from outoforder.core.theta.plan import (
    PARTITION_CAP,
    ROWS_PER_PARTITION,
    SAMPLE_PER_PARTITION,
    Cuts,
    JoinStats,
    PairPlan,
    Theta,
    ValueSummary,
    choose_cuts,
    merge_samples,
    one_bucket_shape,
    partitions_for,
    plan_pairs,
    side_units,
)
from outoforder.errors import ConfigError
from outoforder.spark.estimates import byte_string, estimated_bytes, parallelism, row_size

METHODS = ("fast", "cfs", "one-bucket", "spark-sql", "cross")
_SEED = 17  # 1-Bucket-Theta's random row/column choice: fixed so reruns shuffle alike
# The combinations Spark's broadcast nested loop compares in about the time FastThetaJoin's
# statistics job takes (docs/theta.md, "Choosing the nested loop"): an inequality with fewer, by
# Spark's size estimates, goes straight to the loop
NESTED_LOOP_PAIRS = 200_000_000


_TALLY = "_tally"  # the column of a pair task's tally row (null on the result rows)
_TALLY_FIELDS = ("tested", "routed", "output", "nulls")


class _Tally:
    """Counters of the pair tasks, which add one tally row each to their output.

    A tally row holds the task's rows compared, rows routed to it, rows output and null/NaN rows
    dropped; the result rows leave it out. Spark observes their sums
    (:class:`pyspark.sql.Observation`) in the first action that computes the rows, whatever
    DataFrame derived from them it runs on.
    """

    def __init__(self, null_rows: int = 0, complete_output: bool = True) -> None:
        from pyspark.sql import Observation

        self.observed = Observation(f"theta_tally_{uuid.uuid4().hex}")
        self.null_rows = null_rows  # those the statistics counted before
        # whether every output row passes through the pair tasks (full pairs joined in the JVM do not)
        self.complete_output = complete_output
        # where no pair task runs (inequalities): (rows compared, rows routed), by a job of its own
        # when the counters are first read
        self.counted: Callable[[], tuple[int, int]] | None = None
        self._counts: tuple[int, int] | None = None
        self._observing = False

    def observe(self, out: DataFrame) -> DataFrame:
        """The pair tasks' output without its tally rows, their sums observed."""
        self._observing = True
        sums = [F.coalesce(F.sum(f"{_TALLY}.{k}"), F.lit(0)).alias(k) for k in _TALLY_FIELDS]
        return out.observe(self.observed, *sums).where(F.col(_TALLY).isNull()).drop(_TALLY)

    def sums(self) -> dict[str, int]:
        """The observed sums (zeros before the first action, or where no pair task ran)."""
        got = self.observed.get if self._observing else {}
        return {k: int(got.get(k) or 0) for k in _TALLY_FIELDS}

    def compared_and_routed(self) -> tuple[int, int]:
        """Rows compared and rows routed to partial pairs (as of the first action, or counted once)."""
        if self.counted is None:
            got = self.sums()
            return got["tested"], got["routed"]
        if self._counts is None:
            self._counts = self.counted()
        return self._counts


@dataclass
class ThetaResult:
    """The joined rows (lazy) and the run's counters; :meth:`release` frees cached inputs.

    FastThetaJoin's per-row counters (rows compared, rows routed to partial pairs, output) are
    known once the rows have been computed: :meth:`count` fills them in, :meth:`refresh` after
    any other action (the output only where no full pair was joined in the JVM: then count()).
    """

    rows: DataFrame
    stats: JoinStats
    method: str
    cached: list[DataFrame] = field(default_factory=list)
    tally: _Tally | None = None

    def count(self) -> int:
        """Run the join and count its rows (sets ``stats.output_rows`` and the counters)."""
        n = self.rows.count()
        self.refresh()
        self.stats.output_rows = n  # the count itself: the counters add up every action so far
        return n

    def refresh(self) -> JoinStats:
        """The counters as the executors left them after the actions run so far."""
        if self.tally is not None:
            self.stats.rows_compared, self.stats.replicated_rows = self.tally.compared_and_routed()
            got = self.tally.sums()
            if self.tally.complete_output:  # else count() sets it
                self.stats.output_rows = got["output"]
            self.stats.null_rows = self.tally.null_rows + got["nulls"]
        return self.stats

    def release(self) -> None:
        """Unpersist what the method cached (the CFS sort, multi-way intermediate results)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


def theta_column(theta: Theta, a: Column, b: Column) -> Column:
    """``a θ b`` as a Spark column (the same operators as :meth:`Theta.holds`)."""
    if theta.op == "<":
        return a < b
    if theta.op == "<=":
        return a <= b
    if theta.op == ">=":
        return a >= b
    if theta.op == ">":
        return a > b
    if theta.op == "=":
        return a == b
    return F.abs(a - b) <= F.lit(theta.band)


def theta_join(
    r: DataFrame,
    s: DataFrame,
    on: tuple[str, str],
    theta: Theta,
    method: str = "fast",
    partitions: int = 8,
    rows_per_partition: int = ROWS_PER_PARTITION,
    nested_loop_pairs: int = NESTED_LOOP_PAIRS,
) -> ThetaResult:
    """Join ``r`` and ``s`` on ``r[on[0]] θ s[on[1]]`` with one of :data:`METHODS`.

    ``partitions`` is the most range partitions FastThetaJoin uses (1-Bucket-Theta's and CFS's
    regions); it uses fewer where the sides hold fewer than ``rows_per_partition`` rows each
    (:func:`~outoforder.core.theta.plan.partitions_for`). An inequality whose sides make at most
    ``nested_loop_pairs`` combinations by Spark's estimates (S small enough to broadcast) is
    FastThetaJoin's broadcast nested loop (0: always partition).
    """
    if method not in METHODS:
        msg = f"unknown θ-join method {method!r}; known: {', '.join(METHODS)}"
        raise ConfigError(msg)
    if partitions < 1:
        msg = f"need at least one partition, got {partitions}"
        raise ConfigError(msg)
    clash = set(r.columns) & set(s.columns)
    if clash:
        msg = f"the two sides share column names {sorted(clash)}: prefix them before a θ-join"
        raise ConfigError(msg)
    for df, col in ((r, on[0]), (s, on[1])):
        if col not in df.columns:
            msg = f"join column {col!r} not in {df.columns}"
            raise ConfigError(msg)
    if method == "fast":
        return _fast(r, s, on, theta, partitions, rows_per_partition, nested_loop_pairs)
    return _RUNNERS[method](r, s, on, theta, partitions)


def _valid(col: str) -> Column:
    c = F.col(col)
    return c.isNotNull() & ~F.isnan(c)


def _condition(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta) -> Column:
    return theta_column(theta, r[on[0]].cast("double"), s[on[1]].cast("double"))


def _empty(r: DataFrame, s: DataFrame, stats: JoinStats, method: str) -> ThetaResult:
    return ThetaResult(r.crossJoin(s).limit(0), stats, method)


def _fast(
    r: DataFrame,
    s: DataFrame,
    on: tuple[str, str],
    theta: Theta,
    partitions: int,
    rows_per_partition: int,
    nested_loop_pairs: int,
) -> ThetaResult:
    r_bytes, s_bytes = estimated_bytes(r), estimated_bytes(s)
    if theta.op in ("band", "=") and r_bytes + s_bytes <= _BYTES_PER_ROW * rows_per_partition:
        return _fast_in_one_task(r, s, on, theta)
    s_broadcast = s_bytes <= _broadcast_bytes(r)
    if theta.op in _INEQUALITIES and s_broadcast:
        pairs = r_bytes / row_size(r) * (s_bytes / row_size(s))
        if pairs <= nested_loop_pairs:
            return _nested_loop(r, s, on, theta)
    most = min(partitions, PARTITION_CAP)
    points = SAMPLE_PER_PARTITION * most
    rs, ss = _side_stats(r, s, on, points)
    # the cross filter drops its rows while they are routed, in the join's own pass: not counted
    stats = JoinStats(null_rows=rs.nulls + ss.nulls, r_filtered=None, s_filtered=None)
    if rs.n == 0 or ss.n == 0:
        return _empty(r, s, stats, "fast")
    r_rng, s_rng = theta.matching_ranges(rs.lo, rs.hi, ss.lo, ss.hi)
    if r_rng[0] > r_rng[1] or s_rng[0] > s_rng[1]:
        return _empty(r, s, stats, "fast")
    sample = merge_samples([(rs.sample, rs.n), (ss.sample, ss.n)], points)
    lo, hi = min(r_rng[0], s_rng[0]), max(r_rng[1], s_rng[1])
    cuts = choose_cuts(sample, lo, hi, partitions_for(theta, rs.n, ss.n, most, rows_per_partition))
    plan = plan_pairs(side_units(cuts, *r_rng), side_units(cuts, *s_rng), theta)
    stats.partitions, stats.partitioning = cuts.partitions, cuts.kind
    stats.partition_pairs = len(plan.pairs)
    stats.full_pairs = sum(full for _, _, full in plan.pairs)
    if not plan.pairs:
        return _empty(r, s, stats, "fast")
    ra = _routed(r, on[0], r_rng, cuts, plan, theta, "r")
    sa = _routed(s, on[1], s_rng, cuts, plan, theta, "s")
    full = [f for _, _, f in plan.pairs]
    in_full = F.element_at(_literal_array([int(f) for f in full], "array<int>"), F.col("_pair") + 1) == 1
    in_jvm = theta.op in _INEQUALITIES
    tally = _Tally(stats.null_rows, complete_output=not any(full) and not in_jvm)
    parts = []
    if not all(full):
        pra, psa = ra.where(~in_full), sa.where(~in_full)
        if in_jvm:
            parts.append(_tested_in_jvm(pra, psa, r, s, on, theta, tally))
        else:
            # one shuffle partition per pair, up to a few per core, so that the pairs spread over the cores
            tasks = min(len(full) - sum(full), _TASKS_PER_CORE * parallelism(r.sparkSession))
            parts.append(_sorted_pairs(pra, psa, r, s, on, theta, tasks, tally))
    if any(full):
        rf = ra.where(in_full)
        if s_broadcast:
            parts.append(_full_pairs(rf, r, s, on[1], s_rng, cuts, plan))
        else:  # every combination by an equi-join on the pair, in the JVM
            parts.append(rf.join(sa.where(in_full), "_pair").select(*r.columns, *s.columns))
    out = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    return ThetaResult(out, stats, "fast", tally=tally)


def _tested_in_jvm(
    ra: DataFrame, sa: DataFrame, r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, tally: _Tally
) -> DataFrame:
    """An inequality's partial pairs: an equi-join on the pair number that tests θ, in the JVM.

    They are the few pairs on the diagonal, where both partitions' ranges overlap, and about half
    of their combinations match: testing each costs about two comparisons per output row, less
    than sending the rows through Python to be sorted. The rows compared and routed are counted by
    a small job of their own when the counters are first read (no pair task is there to count them).
    """

    def counted() -> tuple[int, int]:
        rows = (
            ra.groupBy("_pair").count().withColumn("_side", F.lit(0))
            .unionByName(sa.groupBy("_pair").count().withColumn("_side", F.lit(1)))
            .collect()
        )  # fmt: skip
        per: list[dict[int, int]] = [{}, {}]
        for row in rows:
            per[row["_side"]][row["_pair"]] = row["count"]
        tested = sum(n * per[1].get(pair, 0) for pair, n in per[0].items())
        return tested, sum(per[0].values()) + sum(per[1].values())

    tally.counted = counted
    right = sa.withColumnRenamed("_pair", "_spair")
    test = (F.col("_pair") == F.col("_spair")) & theta_column(theta, F.col(on[0]), F.col(on[1]))
    return ra.join(right, test).select(*r.columns, *s.columns)


def _broadcast_bytes(df: DataFrame) -> int:
    """Spark's broadcast join threshold of the session (``spark.sql.autoBroadcastJoinThreshold``)."""
    text = (df.sparkSession.conf.get("spark.sql.autoBroadcastJoinThreshold", "10485760") or "-1").strip()
    if text.startswith("-"):  # broadcasts turned off
        return -1
    return byte_string(text)


def _full_pairs(
    rf: DataFrame, r: DataFrame, s: DataFrame, col: str, rng: tuple[float, float], cuts: Cuts, plan: PairPlan
) -> DataFrame:
    """Every combination of the full pairs' rows (an S side small enough to broadcast), in the JVM.

    Each S partition's rows become one array row, broadcast; each R row of a full pair (``rf``)
    is joined with its S partition's array, which is exploded: an S row is shipped once, and the
    output rows come from the explode rather than from matching keys (``<`` at 20k rows per side
    in the θ benchmark: 5.07 s, Spark SQL's nested loop 5.32 s). An inequality's output is mostly
    full pairs: it never passes through Python.
    """
    s_pid = [plan.s_units[b].pid if is_full else -1 for _, b, is_full in plan.pairs]
    keep, pid = _kept_and_partition(s, col, rng, cuts)
    arrays = (
        s.where(keep)
        .withColumn("_spid", pid)
        .where(F.col("_spid").isin(sorted({p for p in s_pid if p >= 0})))
        .groupBy("_spid")
        .agg(F.collect_list(F.struct(*s.columns)).alias("_rows"))
    )
    left = rf.withColumn("_spid", F.element_at(_literal_array(s_pid, "array<int>"), F.col("_pair") + 1))
    return left.join(F.broadcast(arrays), "_spid").select(*r.columns, F.inline("_rows"))


_INEQUALITIES = ("<", "<=", ">", ">=")
_TASKS_PER_CORE = 4
# the least a row of a side can take in Spark's size estimate (one double): under this many bytes
# per row of rows_per_partition, both sides together are certainly one partition's worth
_BYTES_PER_ROW = 8


def _nested_loop(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta) -> ThetaResult:
    """An inequality small enough that Spark's broadcast nested loop costs less than the statistics.

    An inequality between overlapping ranges matches a large share of all combinations, so the
    loop's comparisons are not much more than its output; below :data:`NESTED_LOOP_PAIRS` the
    whole loop takes about what FastThetaJoin's statistics job alone does. The rows compared
    (every combination of valid rows) are counted when the counters are first read.
    """
    rv, sv = r.where(_valid(on[0])), s.where(_valid(on[1]))
    stats = JoinStats(partitions=1, partitioning="nested-loop", r_filtered=None, s_filtered=None)
    tally = _Tally(complete_output=False)
    tally.counted = lambda: (rv.count() * sv.count(), 0)
    out = rv.join(F.broadcast(sv), _condition(rv, sv, on, theta)).select(*r.columns, *s.columns)
    return ThetaResult(out, stats, "fast", tally=tally)


def _fast_in_one_task(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta) -> ThetaResult:
    """Inputs that are one partition's worth, by Spark's estimate, for ``=`` and bands: no statistics.

    The plan would be a single partition (:func:`partitions_for`) whose pair needs no cross
    filter: every row goes to one pair, joined by sorting in one task. One job instead of two;
    the task drops and counts the null/NaN rows.
    """
    stats = JoinStats(
        partitions=1, partitioning="single", partition_pairs=1, r_filtered=None, s_filtered=None
    )
    tally = _Tally()
    ra, sa = r.withColumn("_pair", F.lit(0)), s.withColumn("_pair", F.lit(0))
    return ThetaResult(_sorted_pairs(ra, sa, r, s, on, theta, 1, tally), stats, "fast", tally=tally)


def _sorted_pairs(
    ra: DataFrame,
    sa: DataFrame,
    r: DataFrame,
    s: DataFrame,
    on: tuple[str, str],
    theta: Theta,
    tasks: int,
    tally: _Tally,
) -> DataFrame:
    """The partial pairs of the routed sides (``_pair``), each joined by sorting in a task of its own."""
    # the result columns may be null on a task's tally row
    fields = [StructField(f.name, f.dataType, True) for f in r.schema.fields + s.schema.fields]
    schema = StructType(
        [*fields, StructField(_TALLY, StructType([StructField(k, LongType()) for k in _TALLY_FIELDS]))]
    )
    join = _pair_joiner(theta, on, (r.columns, s.columns), schema)
    ra, sa = ra.repartition(tasks, "_pair"), sa.repartition(tasks, "_pair")
    return tally.observe(ra.groupBy("_pair").cogroup(sa.groupBy("_pair")).applyInArrow(join, schema))


_SUMMARY = "_side int, n long, nulls long, lo double, hi double, sample array<double>"


def _side_stats(r: DataFrame, s: DataFrame, on: tuple[str, str], points: int = 0) -> list[ValueSummary]:
    """Per side (R, S), in one stage without a shuffle: rows, null/NaN rows, min, max, quantiles.

    Each task summarizes its batches (:class:`ValueSummary`, at most ``points`` quantiles) and
    sends the driver one row per side; the driver merges them. No value is collected.
    """
    both = r.select(F.lit(0).alias("_side"), F.col(on[0]).cast("double").alias("_v")).unionByName(
        s.select(F.lit(1).alias("_side"), F.col(on[1]).cast("double").alias("_v"))
    )
    parts: list[list[ValueSummary]] = [[], []]
    for row in both.mapInArrow(_summarizer(points), _SUMMARY).collect():
        sample = np.array(row["sample"], dtype=np.float64)
        parts[row["_side"]].append(ValueSummary(row["n"], row["nulls"], row["lo"], row["hi"], sample))
    return [ValueSummary.merge(p, points) for p in parts]


def _summarizer(points: int) -> Callable[[Any], Any]:
    """The executors' side of :func:`_side_stats`: one :class:`ValueSummary` per side and task."""

    def summarize(batches: Any) -> Any:
        import pyarrow as pa

        parts: list[list[ValueSummary]] = [[], []]
        for batch in batches:
            side = batch.column(0).to_numpy(zero_copy_only=False)
            v = batch.column(1).to_numpy(zero_copy_only=False)  # nulls become NaN
            for k in (0, 1):
                mine = v[side == k]
                if mine.size:
                    parts[k].append(ValueSummary.of(mine, points))
        got = [(k, ValueSummary.merge(p, points)) for k, p in enumerate(parts) if p]
        yield pa.RecordBatch.from_pydict(
            {
                "_side": [k for k, _ in got],
                "n": [m.n for _, m in got],
                "nulls": [m.nulls for _, m in got],
                "lo": [m.lo for _, m in got],
                "hi": [m.hi for _, m in got],
                "sample": [m.sample.tolist() for _, m in got],
            },
            schema=pa.schema(
                [
                    ("_side", pa.int32()),
                    ("n", pa.int64()),
                    ("nulls", pa.int64()),
                    ("lo", pa.float64()),
                    ("hi", pa.float64()),
                    ("sample", pa.list_(pa.float64())),
                ]
            ),
        )

    return summarize


def _partition_of(v: Column, cuts: Cuts, row_hash: Callable[[], Column]) -> Column:
    """:meth:`Cuts.assign` as a column: a balanced tree of comparisons over the cuts.

    ``row_hash`` is asked for only when a value is spread over several partitions.
    """
    values = cuts.values

    def below(lo: int, hi: int) -> Column:  # cuts <= v, knowing values[:lo] <= v < values[hi:]
        if lo == hi:
            return F.lit(lo)
        mid = (lo + hi) // 2
        return F.when(v < F.lit(values[mid]), below(lo, mid)).otherwise(below(mid + 1, hi))

    pid = below(0, len(values))
    for value, first, k in cuts.heavy():
        pid = F.when(v == F.lit(value), F.lit(first) + F.pmod(row_hash(), F.lit(k))).otherwise(pid)
    return pid.cast("int")


def _kept_and_partition(
    df: DataFrame, col: str, rng: tuple[float, float], cuts: Cuts
) -> tuple[Column, Column]:
    """Whether a row of a side is in its filtered range, and its range partition (as the plan's)."""
    v = F.col(col).cast("double")
    keep = _valid(col) & (v >= F.lit(rng[0])) & (v <= F.lit(rng[1]))
    return keep, _partition_of(v, cuts, lambda: F.xxhash64(*[F.col(c) for c in df.columns]))


def _routed(
    df: DataFrame, col: str, rng: tuple[float, float], cuts: Cuts, plan: PairPlan, theta: Theta, side: str
) -> DataFrame:
    """Each row of one side once per pair its partition is in (an int column ``_pair``).

    Rows outside the side's filtered range go nowhere; a partial pair gets only the rows that can
    meet the other unit's value range (the cross filter per pair), a full pair all of them. The
    routing is constant arrays in the projection: no lookup join, no broadcast job.
    """
    v = F.col(col).cast("double")
    keep, pid = _kept_and_partition(df, col, rng, cuts)
    units = plan.r_units if side == "r" else plan.s_units
    of_pid: list[list[int]] = [[] for _ in range(cuts.partitions)]
    lows, highs = [], []
    for k, (a, b, full) in enumerate(plan.pairs):
        of_pid[units[a if side == "r" else b].pid].append(k)
        if full:
            lows.append(-math.inf)
            highs.append(math.inf)
        else:
            ua, ub = plan.r_units[a], plan.s_units[b]
            bounds = theta.cross_bounds(ua.lo, ua.hi, ub.lo, ub.hi)[0 if side == "r" else 1]
            lows.append(bounds[0])
            highs.append(bounds[1])
    starts: list[int] = []
    flat: list[int] = []
    for ids in of_pid:
        starts.append(len(flat) + 1)
        flat.extend(ids)
    mine = F.slice(
        _literal_array(flat, "array<int>"),
        F.element_at(_literal_array(starts, "array<int>"), pid + 1),
        F.element_at(_literal_array([len(x) for x in of_pid], "array<int>"), pid + 1),
    )
    pair = F.col("_pair") + 1
    fits = (v >= F.element_at(_literal_doubles(lows), pair)) & (
        v <= F.element_at(_literal_doubles(highs), pair)
    )
    return df.where(keep).withColumn("_pair", F.explode(mine)).where(fits)


def _literal_array(values: Sequence[int], sql_type: str) -> Column:
    """A constant int array from one string literal (folded once by the optimizer).

    One py4j call instead of one per element: a routing table has thousands.
    """
    return F.split(F.lit(",".join(map(str, values))), ",").cast(sql_type)


def _literal_doubles(values: Sequence[float]) -> Column:
    """A constant double array from one string literal (exact: ``repr`` round-trips a double)."""
    text = ",".join(
        "Infinity" if x == math.inf else "-Infinity" if x == -math.inf else repr(x) for x in values
    )
    return F.split(F.lit(text), ",").cast("array<double>")


def _pair_joiner(
    theta: Theta,
    on: tuple[str, str],
    columns: tuple[list[str], list[str]],
    schema: StructType,
) -> Callable[[Any, Any, Any], Any]:
    """The executors' join of one partial pair's two sides (Arrow tables), by sorting.

    :func:`~outoforder.core.theta.sortjoin.sorted_join`; full pairs never come here (the JVM joins
    them). Besides the joined rows, one tally row (see :class:`_Tally`).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)

    def tally_row(tested: int, routed: int, output: int, nulls: int) -> Any:
        import pyarrow as pa

        cols = [pa.nulls(1, f.type) for f in arrow_schema][:-1]
        counts = pa.StructArray.from_arrays(
            [pa.array([v], pa.int64()) for v in (tested, routed, output, nulls)], names=list(_TALLY_FIELDS)
        )
        return pa.Table.from_arrays([*cols, counts], schema=arrow_schema)

    def join(key: Any, left: Any, right: Any) -> Any:
        import pyarrow as pa

        from outoforder.core.theta.sortjoin import sorted_join

        left, right = left.select(columns[0]), right.select(columns[1])
        a = np.asarray(left.column(on[0]).to_numpy(zero_copy_only=False), dtype=np.float64)
        b = np.asarray(right.column(on[1]).to_numpy(zero_copy_only=False), dtype=np.float64)
        nulls = int(np.isnan(a).sum() + np.isnan(b).sum())  # only where no statistics dropped them
        if nulls:
            keep_a, keep_b = ~np.isnan(a), ~np.isnan(b)
            left, right, a, b = left.filter(keep_a), right.filter(keep_b), a[keep_a], b[keep_b]
        if left.num_rows == 0 or right.num_rows == 0:
            return tally_row(0, left.num_rows + right.num_rows, 0, nulls)
        m = sorted_join(a, b, theta)
        lt, rt = left.take(m.r), right.take(m.s)
        rows = pa.Table.from_arrays(
            [*lt.columns, *rt.columns, pa.nulls(lt.num_rows, arrow_schema.field(_TALLY).type)],
            schema=arrow_schema,
        )
        return pa.concat_tables(
            [rows, tally_row(m.tested, left.num_rows + right.num_rows, int(m.r.size), nulls)]
        )

    return join


def _one_bucket_rows(
    r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int, n_r: int, n_s: int
) -> tuple[DataFrame, int, int]:
    """1-Bucket-Theta's region join; returns the rows, the regions used and the replicated rows."""
    rows, cols = one_bucket_shape(partitions, n_r, n_s)
    r_band = F.floor(F.rand(_SEED) * rows).cast("long")
    s_band = F.floor(F.rand(_SEED + 1) * cols).cast("long")
    ra = r.withColumn("_rb", r_band).withColumn(
        "_rcell", F.explode(F.array(*[F.col("_rb") * cols + j for j in range(cols)]))
    )
    sa = s.withColumn("_sb", s_band).withColumn(
        "_scell", F.explode(F.array(*[F.lit(i * cols) + F.col("_sb") for i in range(rows)]))
    )
    cond = (ra["_rcell"] == sa["_scell"]) & _condition(ra, sa, on, theta)
    out = ra.join(sa, cond).select(*[ra[c] for c in r.columns], *[sa[c] for c in s.columns])
    return out, rows * cols, n_r * cols + n_s * rows


def _one_bucket(
    r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int
) -> ThetaResult:
    r, s = r.where(_valid(on[0])), s.where(_valid(on[1]))
    n_r, n_s = r.count(), s.count()  # the region shape needs |R| and |S|
    stats = JoinStats(rows_compared=n_r * n_s)
    out, regions, replicated = _one_bucket_rows(r, s, on, theta, partitions, n_r, n_s)
    stats.partition_pairs, stats.replicated_rows = regions, replicated
    return ThetaResult(out, stats, "one-bucket")


def _cfs(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    r_sorted = r.where(_valid(on[0])).orderBy(on[0]).persist(StorageLevel.MEMORY_AND_DISK)
    s_sorted = s.where(_valid(on[1])).orderBy(on[1]).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [r_sorted, s_sorted]
    rs, ss = _side_stats(r_sorted, s_sorted, on)
    n_r, n_s = rs.n, ss.n
    stats = JoinStats()
    if n_r == 0 or n_s == 0:
        res = _empty(r, s, stats, "cfs")
        res.cached = cached
        return res
    (rb_lo, rb_hi), (sb_lo, sb_hi) = theta.cross_bounds(rs.lo, rs.hi, ss.lo, ss.hi)
    rv, sv = F.col(on[0]).cast("double"), F.col(on[1]).cast("double")
    r_kept = r_sorted.where((rv >= rb_lo) & (rv <= rb_hi))
    s_kept = s_sorted.where((sv >= sb_lo) & (sv <= sb_hi))
    k_r, k_s = r_kept.count(), s_kept.count()
    stats.r_filtered, stats.s_filtered = n_r - k_r, n_s - k_s
    stats.rows_compared = k_r * k_s
    out, regions, replicated = _one_bucket_rows(r_kept, s_kept, on, theta, partitions, k_r, k_s)
    stats.partition_pairs, stats.replicated_rows = regions, replicated
    return ThetaResult(out, stats, "cfs", cached)


def _spark_sql(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    r, s = r.where(_valid(on[0])), s.where(_valid(on[1]))
    out = r.join(s, _condition(r, s, on, theta))
    return ThetaResult(out.select(*r.columns, *s.columns), JoinStats(), "spark-sql")


def _cross(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, partitions: int) -> ThetaResult:
    r, s = r.where(_valid(on[0])), s.where(_valid(on[1]))
    out = r.join(s.hint("shuffle_replicate_nl"), _condition(r, s, on, theta))
    return ThetaResult(out.select(*r.columns, *s.columns), JoinStats(), "cross")


_RUNNERS: dict[str, Callable[[DataFrame, DataFrame, tuple[str, str], Theta, int], ThetaResult]] = {
    "cfs": _cfs,
    "one-bucket": _one_bucket,
    "spark-sql": _spark_sql,
    "cross": _cross,
}


@dataclass
class MultiwayResult:
    """The final rows (lazy), every pairwise join by round, the cached intermediates."""

    rows: DataFrame
    joins: list[list[ThetaResult]]
    cached: list[DataFrame] = field(default_factory=list)

    @property
    def rounds(self) -> list[list[JoinStats]]:
        """The counters of every pairwise join by round, as of the actions run so far."""
        return [[res.refresh() for res in rnd] for rnd in self.joins]

    def release(self) -> None:
        """Unpersist the intermediate results (after the final rows have been used)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


_Group = tuple[int, int, DataFrame]  # first and last frame index in the group, its rows


def multiway_join(
    frames: Sequence[DataFrame],
    cols: Sequence[str],
    thetas: Sequence[Theta],
    method: str = "fast",
    partitions: int = 8,
    rows_per_partition: int = ROWS_PER_PARTITION,
) -> MultiwayResult:
    """``F0.c0 θ0 F1.c1 θ1 F2.c2 …`` as the seed's pairwise tree.

    Round by round, neighbouring groups are joined two by two on the predicate that links them,
    the pairs of a round concurrently (one driver thread each); every intermediate result is
    materialized (cached), because the next round's plan needs its min and max. An odd group out
    waits for the next round. The last join stays lazy.
    """
    if len(frames) < 2 or len(cols) != len(frames) or len(thetas) != len(frames) - 1:
        msg = (
            "a multi-way θ-join needs n >= 2 frames, n columns and n - 1 predicates; "
            f"got {len(frames)}, {len(cols)}, {len(thetas)}"
        )
        raise ConfigError(msg)
    groups: list[_Group] = [(i, i, f) for i, f in enumerate(frames)]
    result = MultiwayResult(frames[0], [])

    def join_pair(left: _Group, right: _Group, materialize: bool) -> tuple[_Group, ThetaResult]:
        res = theta_join(
            left[2],
            right[2],
            (cols[left[1]], cols[right[0]]),
            thetas[left[1]],
            method,
            partitions,
            rows_per_partition,
        )
        rows = res.rows
        result.cached.extend(res.cached)
        if materialize:
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
            result.cached.append(rows)
            n = rows.count()
            res.refresh()
            res.stats.output_rows = n
        return (left[0], right[1], rows), res

    try:
        while len(groups) > 1:
            materialize = len(groups) > 2
            with ThreadPoolExecutor(max_workers=len(groups) // 2) as pool:
                futures = [
                    pool.submit(join_pair, groups[k], groups[k + 1], materialize)
                    for k in range(0, len(groups) - 1, 2)
                ]
                done = [f.result() for f in futures]
            result.joins.append([res for _, res in done])
            groups = [g for g, _ in done] + ([groups[-1]] if len(groups) % 2 else [])
    except BaseException:
        result.release()
        raise
    result.rows = groups[0][2]
    return result
