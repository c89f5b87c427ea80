"""Every θ-join method on Spark returns exactly DuckDB's and the brute-force oracle's rows."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from outoforder.core.theta.plan import Theta, brute_force
from outoforder.errors import ConfigError
from outoforder.spark.theta import METHODS, multiway_join, theta_join

PREDICATES = ["<", "<=", ">=", ">", "=", "band:0", "band:2.5"]
SQL = {"<": "<", "<=": "<=", ">=": ">=", ">": ">", "=": "="}
values = st.one_of(
    st.integers(-6, 6).map(float),  # many duplicates
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from([None, math.nan, 1e308, -1e308, math.inf, -math.inf]),
)


def frame(spark, name: str, vals: list[float | None]):
    rows = [(i, v) for i, v in enumerate(vals)]
    return spark.createDataFrame(rows, f"{name}_id long, {name}_v double")


def pandas_frame(spark, name: str, vals: list[float | None]):
    """A side made from pandas: unlike a list of rows, Spark knows its size."""
    v = np.array([math.nan if x is None else x for x in vals], dtype=float)
    pdf = pd.DataFrame({f"{name}_id": np.arange(len(vals), dtype=np.int64), f"{name}_v": v})
    return spark.createDataFrame(pdf, f"{name}_id long, {name}_v double")


def sql_predicate(op: str, a: str, b: str) -> str:
    if op.startswith("band:"):
        return f"abs({a} - {b}) <= {float(op.split(':')[1])}"
    return f"{a} {SQL[op]} {b}"


def duckdb_pairs(r: list[float | None], s: list[float | None], op: str) -> list[tuple[int, int]]:
    """DuckDB's inner join on the same rows (NaN dropped first: DuckDB, like Spark, ranks NaN highest)."""
    con = duckdb.connect()
    tr = pa.table({"r_id": list(range(len(r))), "r_v": pa.array(r, pa.float64())})
    ts = pa.table({"s_id": list(range(len(s))), "s_v": pa.array(s, pa.float64())})
    con.register("tr", tr)
    con.register("ts", ts)
    q = (
        "select r_id, s_id from tr join ts on "
        f"{sql_predicate(op, 'r_v', 's_v')} and not isnan(r_v) and not isnan(s_v) order by 1, 2"
    )
    return [tuple(x) for x in con.execute(q).fetchall()]


def oracle(r, s, op) -> list[tuple[int, int]]:
    ra = np.array([math.nan if v is None else v for v in r], dtype=np.float64)
    sa = np.array([math.nan if v is None else v for v in s], dtype=np.float64)
    return [tuple(p) for p in brute_force(ra, sa, Theta.parse(op)).tolist()]


def spark_pairs(spark, r, s, op, method, partitions, nested_loop_pairs=0):
    # one row per partition at least: tiny inputs still get every partition they ask for
    res = theta_join(
        frame(spark, "r", r), frame(spark, "s", s), ("r_v", "s_v"), Theta.parse(op), method, partitions, 1,
        nested_loop_pairs,
    )  # fmt: skip
    try:
        got = sorted((row.r_id, row.s_id) for row in res.rows.collect())
    finally:
        res.release()
    return got, res.refresh()  # the executors' counters, after the collect


def check_all_methods(spark, r, s, op, partitions):
    want = oracle(r, s, op)
    assert duckdb_pairs(r, s, op) == want
    for method in METHODS:
        got, stats = spark_pairs(spark, r, s, op, method, partitions)
        assert got == want, method
        if method == "fast":
            assert stats.null_rows == sum(v is None or math.isnan(v) for v in r + s)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    r=st.lists(values, max_size=25),
    s=st.lists(values, max_size=25),
    op=st.sampled_from(PREDICATES),
    partitions=st.integers(1, 9),
)
def test_every_method_equals_duckdb_and_brute_force(spark, r, s, op, partitions):
    check_all_methods(spark, r, s, op, partitions)


@pytest.mark.parametrize(
    ("case", "r", "s", "op"),
    [
        ("empty side", [], [1.0, 2.0], "<"),
        ("all null", [None, math.nan], [1.0], ">="),
        ("all equal", [3.0] * 40, [3.0] * 30, "<="),
        ("extremes", [1e308, -1e308, math.inf, -math.inf, 0.0], [-1e308, math.inf, 5.0], "band:1"),
        ("heavy skew", [5.0] * 60 + [float(x) for x in range(20)], [float(x) for x in range(0, 40, 2)], ">"),
    ],
)
def test_edge_cases(spark, case, r, s, op):
    check_all_methods(spark, r, s, op, partitions=4)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    r=st.lists(values, max_size=25),
    s=st.lists(values, max_size=25),
    op=st.sampled_from(["=", "band:0", "band:2.5"]),
)
def test_small_band_and_equi_joins_run_in_one_task_without_statistics(spark, r, s, op):
    # the default rows per partition: from pandas, Spark knows these inputs are one partition's worth
    sides = pandas_frame(spark, "r", r), pandas_frame(spark, "s", s)
    res = theta_join(*sides, ("r_v", "s_v"), Theta.parse(op))
    got = sorted((row.r_id, row.s_id) for row in res.rows.collect())
    stats = res.refresh()
    assert got == oracle(r, s, op)
    if r and s:  # (an empty pandas frame reaches Spark without a size estimate)
        assert (stats.partitioning, stats.partition_pairs) == ("single", 1)
    assert stats.null_rows == sum(v is None or math.isnan(v) for v in r + s)
    assert stats.rows_compared <= max(len(got), 1) * 2 + 10


def test_fast_counters_partitions_and_few_comparisons(spark):
    rng = np.random.default_rng(5)
    r = [float(v) for v in rng.uniform(0, 100, 400)]
    s = [float(v) for v in rng.uniform(0, 100, 400)]
    got, stats = spark_pairs(spark, r, s, "<", "fast", partitions=16)
    assert got == oracle(r, s, "<")
    assert (stats.partitions, stats.partitioning) == (16, "range")
    # only the pairs straddling the diagonal are joined row by row; the rest are emitted whole
    assert stats.full_pairs > 0
    assert stats.rows_compared <= 0.2 * len(got)
    assert stats.replicated_rows > 0  # rows routed to the partial pairs
    counted = theta_join(
        frame(spark, "r", r), frame(spark, "s", s), ("r_v", "s_v"), Theta("<"), "fast", 16, 1, 0
    )
    assert counted.count() == counted.stats.output_rows == len(got)
    # full pairs are an explode of the broadcast S partitions; with no broadcast, an equi-join on the pair
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        unbroadcast, ustats = spark_pairs(spark, r, s, "<", "fast", partitions=16)
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")
    assert unbroadcast == got and ustats.rows_compared == stats.rows_compared
    band, bs = spark_pairs(spark, r, s, "band:0.5", "fast", partitions=8)
    assert band == oracle(r, s, "band:0.5")
    assert len(band) <= bs.rows_compared <= 2 * len(band)  # the target: sorting, not all pairs
    skewed = [7.0] * 300 + r[:100]
    sk_got, sk = spark_pairs(spark, skewed, s, ">=", "fast", partitions=8)
    assert sk_got == oracle(skewed, s, ">=")
    assert sk.partitioning == "quantile"  # 300 equal values: equi-depth cuts, the value spread


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    r=st.lists(values, max_size=25),
    s=st.lists(values, max_size=25),
    op=st.sampled_from(["<", "<=", ">=", ">"]),
)
def test_a_small_inequality_is_a_nested_loop_with_the_same_rows(spark, r, s, op):
    def run(bound):  # from pandas: Spark knows the sides' sizes
        res = theta_join(
            pandas_frame(spark, "r", r), pandas_frame(spark, "s", s), ("r_v", "s_v"), Theta.parse(op), "fast",
            8, 1, bound,
        )  # fmt: skip
        return sorted((row.r_id, row.s_id) for row in res.rows.collect()), res.refresh()

    got, stats = run(10**9)
    assert got == oracle(r, s, op)
    if r and s:  # (an empty pandas frame reaches Spark without a size estimate)
        assert stats.partitioning == "nested-loop"
        valid = [sum(v is not None and not math.isnan(v) for v in side) for side in (r, s)]
        assert stats.rows_compared == valid[0] * valid[1]
        again, partitioned = run(0)  # no combinations allowed: partitioned, the same rows
        assert again == got and partitioned.partitioning != "nested-loop"


def test_the_partition_column_assigns_like_the_plan(spark):
    from outoforder.core.theta.plan import Cuts
    from outoforder.spark.theta.fast import partition_of

    cuts = Cuts((-1.0, 0.0, 2.0, 2.0, 2.0, 2.0, 7.5, 1e308), "quantile")
    vals = [-math.inf, -5.0, -1.0, -0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 7.5, 1e308, math.inf]
    df = spark.createDataFrame([(i, v) for i, v in enumerate(vals)], "id long, v double")
    got = df.select("id", "v", partition_of(F.col("v"), cuts, lambda: F.col("id")).alias("p")).collect()
    for row in got:
        assert cuts.assign(np.array([row.v]), np.array([row.id]))[0] == row.p
    assert {row.p for row in got if row.v == 2.0} == {3, 4, 5, 6}  # the heavy value, spread


def test_multiway_four_streams_equals_duckdb(spark):
    rng = np.random.default_rng(11)
    names = ["a", "b", "c", "d"]
    vals = {n: [float(v) for v in rng.integers(0, 30, 25)] for n in names}
    ops = ["band:1", "<", "band:2"]
    con = duckdb.connect()
    for n in names:
        con.register(n, pa.table({f"{n}_id": list(range(25)), f"{n}_v": vals[n]}))
    where = " and ".join(
        sql_predicate(op, f"{x}_v", f"{y}_v") for op, x, y in zip(ops, names, names[1:], strict=False)
    )
    want = con.execute(f"select a_id, b_id, c_id, d_id from a, b, c, d where {where} order by all").fetchall()
    assert want  # the case is not vacuous
    for method in ("fast", "cfs", "spark-sql"):
        frames = [frame(spark, n, vals[n]) for n in names]
        res = multiway_join(frames, [f"{n}_v" for n in names], [Theta.parse(o) for o in ops], method, 4)
        try:
            got = sorted(tuple(row) for row in res.rows.select("a_id", "b_id", "c_id", "d_id").collect())
        finally:
            res.release()
        assert got == [tuple(w) for w in want], method
        assert len(res.rounds) == 2 and len(res.rounds[0]) == 2  # (a⋈b, c⋈d), then one join


def test_bad_input_fails_with_a_clear_error(spark):
    r, s = frame(spark, "r", [1.0]), frame(spark, "s", [2.0])
    with pytest.raises(ConfigError, match="unknown θ-join method"):
        theta_join(r, s, ("r_v", "s_v"), Theta("<"), "hash")
    with pytest.raises(ConfigError, match="share column names"):
        theta_join(r, r, ("r_v", "r_v"), Theta("<"))
    with pytest.raises(ConfigError, match="not in"):
        theta_join(r, s, ("r_v", "x"), Theta("<"))
    with pytest.raises(ConfigError, match="n - 1 predicates"):
        multiway_join([r, s], ["r_v", "s_v"], [])
