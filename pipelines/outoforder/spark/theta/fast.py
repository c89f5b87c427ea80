"""FastThetaJoin on Spark (docs/theta.md): statistics, range partitions, the pairs that can satisfy θ."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from outoforder.core.theta.plan import (
    PARTITION_CAP,
    SAMPLE_PER_PARTITION,
    Cuts,
    JoinStats,
    PairPlan,
    Theta,
    ValueSummary,
    choose_cuts,
    merge_samples,
    partitions_for,
    plan_pairs,
    side_units,
)
from outoforder.spark.estimates import byte_string, estimated_bytes, parallelism, row_size
from outoforder.spark.theta.result import (
    TALLY,
    TALLY_FIELDS,
    Tally,
    ThetaResult,
    condition,
    empty_result,
    theta_column,
    valid_values,
)

# The combinations Spark's broadcast nested loop compares in about the time FastThetaJoin's
# statistics job takes (docs/theta.md, "Choosing the nested loop"): an inequality with fewer, by
# Spark's size estimates, goes straight to the loop
NESTED_LOOP_PAIRS = 200_000_000


def fast_join(
    r: DataFrame,
    s: DataFrame,
    on: tuple[str, str],
    theta: Theta,
    partitions: int,
    rows_per_partition: int,
    nested_loop_pairs: int,
) -> ThetaResult:
    """FastThetaJoin: in one task, as a broadcast nested loop, or over range partition pairs."""
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
    rs, ss = side_stats(r, s, on, points)
    # the cross filter drops its rows while they are routed, in the join's own pass: not counted
    stats = JoinStats(null_rows=rs.nulls + ss.nulls, r_filtered=None, s_filtered=None)
    if rs.n == 0 or ss.n == 0:
        return empty_result(r, s, stats, "fast")
    r_rng, s_rng = theta.matching_ranges(rs.lo, rs.hi, ss.lo, ss.hi)
    if r_rng[0] > r_rng[1] or s_rng[0] > s_rng[1]:
        return empty_result(r, s, stats, "fast")
    sample = merge_samples([(rs.sample, rs.n), (ss.sample, ss.n)], points)
    lo, hi = min(r_rng[0], s_rng[0]), max(r_rng[1], s_rng[1])
    cuts = choose_cuts(sample, lo, hi, partitions_for(theta, rs.n, ss.n, most, rows_per_partition))
    plan = plan_pairs(side_units(cuts, *r_rng), side_units(cuts, *s_rng), theta)
    stats.partitions, stats.partitioning = cuts.partitions, cuts.kind
    stats.partition_pairs = len(plan.pairs)
    stats.full_pairs = sum(full for _, _, full in plan.pairs)
    if not plan.pairs:
        return empty_result(r, s, stats, "fast")
    ra = _routed(r, on[0], r_rng, cuts, plan, theta, "r")
    sa = _routed(s, on[1], s_rng, cuts, plan, theta, "s")
    full = [f for _, _, f in plan.pairs]
    in_full = F.element_at(_literal_array([int(f) for f in full], "array<int>"), F.col("_pair") + 1) == 1
    in_jvm = theta.op in _INEQUALITIES
    tally = Tally(stats.null_rows, complete_output=not any(full) and not in_jvm)
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
    ra: DataFrame, sa: DataFrame, r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta, tally: Tally
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
    rv, sv = r.where(valid_values(on[0])), s.where(valid_values(on[1]))
    stats = JoinStats(partitions=1, partitioning="nested-loop", r_filtered=None, s_filtered=None)
    tally = Tally(complete_output=False)
    tally.counted = lambda: (rv.count() * sv.count(), 0)
    out = rv.join(F.broadcast(sv), condition(rv, sv, on, theta)).select(*r.columns, *s.columns)
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
    tally = Tally()
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
    tally: Tally,
) -> DataFrame:
    """The partial pairs of the routed sides (``_pair``), each joined by sorting in a task of its own."""
    # the result columns may be null on a task's tally row
    fields = [StructField(f.name, f.dataType, True) for f in r.schema.fields + s.schema.fields]
    schema = StructType(
        [*fields, StructField(TALLY, StructType([StructField(k, LongType()) for k in TALLY_FIELDS]))]
    )
    join = _pair_joiner(theta, on, (r.columns, s.columns), schema)
    ra, sa = ra.repartition(tasks, "_pair"), sa.repartition(tasks, "_pair")
    return tally.observe(ra.groupBy("_pair").cogroup(sa.groupBy("_pair")).applyInArrow(join, schema))


_SUMMARY = "_side int, n long, nulls long, lo double, hi double, sample array<double>"


def side_stats(r: DataFrame, s: DataFrame, on: tuple[str, str], points: int = 0) -> list[ValueSummary]:
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
    """The executors' side of :func:`side_stats`: one :class:`ValueSummary` per side and task."""

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


def partition_of(v: Column, cuts: Cuts, row_hash: Callable[[], Column]) -> Column:
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
    keep = valid_values(col) & (v >= F.lit(rng[0])) & (v <= F.lit(rng[1]))
    return keep, partition_of(v, cuts, lambda: F.xxhash64(*[F.col(c) for c in df.columns]))


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
    them). Besides the joined rows, one tally row (see :class:`Tally`).
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)

    def tally_row(tested: int, routed: int, output: int, nulls: int) -> Any:
        import pyarrow as pa

        cols = [pa.nulls(1, f.type) for f in arrow_schema][:-1]
        counts = pa.StructArray.from_arrays(
            [pa.array([v], pa.int64()) for v in (tested, routed, output, nulls)], names=list(TALLY_FIELDS)
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
            [*lt.columns, *rt.columns, pa.nulls(lt.num_rows, arrow_schema.field(TALLY).type)],
            schema=arrow_schema,
        )
        return pa.concat_tables(
            [rows, tally_row(m.tested, left.num_rows + right.num_rows, int(m.r.size), nulls)]
        )

    return join
