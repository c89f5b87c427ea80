"""The θ-join backfill: per-window results equal DuckDB's, reruns change nothing, GX catches gaps."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from outoforder.errors import ConfigError, QualityError
from outoforder.io import delta
from outoforder.io.tables import THETA_RESULTS, THETA_WINDOWS
from outoforder.stages.cli import main
from outoforder.stages.context import StageContext
from outoforder.stages.theta import backfill
from outoforder.stages.theta.backfill import run_interval
from outoforder.stages.theta.files import join_files
from outoforder.stages.theta.spec import ThetaJob
from outoforder.stages.theta.validate import validate_theta

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/theta"
W = 1_000_000
T = 10_000_000_000  # a multiple of the window
JOB = ThetaJob(
    streams=("a", "b", "c", "a"),
    column="value",
    predicates=("band:1", "<", "band:2"),
    window_us=W,
    partitions=3,
)


def arrivals(n=150, seed=2):
    rng = np.random.default_rng(seed)
    value = rng.integers(0, 12, n).astype(float)
    value[rng.random(n) < 0.05] = np.nan  # excluded and counted
    return pd.DataFrame(
        {
            "stream": rng.choice(["a", "b", "c"], n),
            "event_ts": T + rng.integers(0, 3 * W, n),
            "value": value,
        }
    )


def expected(frame: pd.DataFrame, job: ThetaJob) -> dict[int, list[tuple[int, ...]]]:
    """Per window: the sorted tuples of arrival seqs, from DuckDB over the raw frame."""
    con = duckdb.connect()
    f = frame.assign(seq=np.arange(len(frame)), w0=(frame["event_ts"] // W) * W)
    con.register("f", f)
    k = len(job.streams)
    sel = ", ".join(f"t{i}.seq" for i in range(k))
    tables = ", ".join(f"f t{i}" for i in range(k))
    conds = [f"t{i}.stream = '{s}' and not isnan(t{i}.value)" for i, s in enumerate(job.streams)]
    conds += [f"t{i}.w0 = t0.w0" for i in range(1, k)]
    for i, th in enumerate(job.thetas()):
        a, b = f"t{i}.value", f"t{i + 1}.value"
        conds.append(f"abs({a} - {b}) <= {th.band}" if th.op == "band" else f"{a} {th.op} {b}")
    rows = con.execute(f"select t0.w0, {sel} from {tables} where {' and '.join(conds)}").fetchall()
    out: dict[int, list[tuple[int, ...]]] = {}
    for r in rows:
        out.setdefault(int(r[0]), []).append(tuple(int(x) for x in r[1:]))
    return {w: sorted(v) for w, v in out.items()}


def stored(spark, settings, job=JOB) -> dict[int, list[tuple[int, ...]]]:
    df = delta.read(spark, THETA_RESULTS, settings.lake_root).where(F.col("job") == job.job_id())
    out: dict[int, list[tuple[int, ...]]] = {}
    for r in df.select("window_start_us", "seqs").collect():
        out.setdefault(r[0], []).append(tuple(r[1]))
    return {w: sorted(v) for w, v in out.items()}


def snapshot(spark, settings):
    cols = ["window_start_us", "output_rows", "rows", "null_rows"]
    w = (
        delta.read(spark, THETA_WINDOWS, settings.lake_root)
        .select(*cols)
        .orderBy("window_start_us")
        .collect()
    )
    return stored(spark, settings), [tuple(map(str, r)) for r in w]


def test_backfill_equals_duckdb_reruns_change_nothing_and_gx_checks_completeness(
    spark, settings, load_bronze
):
    frame = arrivals()
    load_bronze(frame, SOURCE)
    want = expected(frame, JOB)
    assert sum(map(len, want.values())) > 20  # not vacuous
    summary = run_interval(StageContext.of(spark, settings, SOURCE, JOB), T, T + 3 * W)
    assert summary.windows == 3 and summary.output_rows == sum(map(len, want.values()))
    assert {w: v for w, v in stored(spark, settings).items() if v} == want
    windows = {
        r["window_start_us"]: r for r in delta.read(spark, THETA_WINDOWS, settings.lake_root).collect()
    }
    for w0, row in windows.items():
        in_w = frame[(frame["event_ts"] // W) * W == w0]
        assert row["rows"] == [int((in_w["stream"] == s).sum()) for s in JOB.streams]
        assert row["null_rows"] == [
            int(((in_w["stream"] == s) & in_w["value"].isna()).sum()) for s in JOB.streams
        ]
    validate_theta(StageContext.of(spark, settings, SOURCE, JOB), T, T + 3 * W, sample=3)

    before = snapshot(spark, settings)
    # in parts of one window each (a long backfill holds one part at a time): the same tables
    parted = run_interval(StageContext.of(spark, settings, SOURCE, JOB), T, T + 3 * W, rows_per_part=1)
    assert parted.output_rows == summary.output_rows and parted.rows_compared == summary.rows_compared
    again = snapshot(spark, settings)
    assert again[0] == before[0] and [r[:4] for r in again[1]] == [r[:4] for r in before[1]]
    run_interval(StageContext.of(spark, settings, SOURCE, JOB), T, T + 3 * W)  # a rerun
    cfs = ThetaJob(**{**JOB.__dict__, "method": "cfs"})
    run_interval(
        StageContext.of(spark, settings, SOURCE, cfs), T + W, T + 2 * W
    )  # an overlapping backfill, another method
    after = snapshot(spark, settings)
    assert after[0] == before[0]
    assert [r[:4] for r in after[1]] == [r[:4] for r in before[1]]

    # a lost result is caught by the completeness check
    from delta.tables import DeltaTable

    stored_before = delta.read(spark, THETA_RESULTS, settings.lake_root).count()
    w_lost = max(want, key=lambda w: len(want[w]))
    first_seq = want[w_lost][0][0]
    DeltaTable.forPath(spark, THETA_RESULTS.path(settings.lake_root)).delete(
        (F.col("window_start_us") == w_lost) & (F.element_at("seqs", 1) == first_seq)
    )
    lost = sum(1 for r in want[w_lost] if r[0] == first_seq)
    assert lost >= 1
    assert delta.read(spark, THETA_RESULTS, settings.lake_root).count() == stored_before - lost
    with pytest.raises(QualityError):
        validate_theta(StageContext.of(spark, settings, SOURCE, JOB), T, T + 3 * W, sample=3)


def test_equi_join_with_the_mcf_and_semi_prefilters_stores_the_same_rows(
    spark, settings, load_bronze, monkeypatch
):
    frame = arrivals(240, 5)
    load_bronze(frame, SOURCE)
    plain = ThetaJob(
        streams=("a", "b", "c"), column="value", predicates=("=", "="), window_us=W, partitions=3
    )
    want = expected(frame, plain)
    assert sum(map(len, want.values())) > 20
    for pre in ("mcf", "semi"):
        if pre == "semi":  # windows too large for one task: each joined on its own, pre-filtered on Spark
            monkeypatch.setattr(backfill, "_split_windows", lambda job, counts, starts: ([], starts))
        job = ThetaJob(**{**plain.__dict__, "prefilter": pre})
        assert job.job_id() == plain.job_id()  # same query, same rows: one slice in the tables
        run_interval(StageContext.of(spark, settings, SOURCE, job), T, T + 3 * W)
        assert {w: v for w, v in stored(spark, settings, job).items() if v} == want
        rows = delta.read(spark, THETA_WINDOWS, settings.lake_root).orderBy("window_start_us").collect()
        assert all(r["prefilter"] == pre and len(r["kept_rows"]) == 3 for r in rows)
        assert all(k <= n for r in rows for k, n in zip(r["kept_rows"], r["rows"], strict=True))
        if pre == "mcf":  # the windows' own filters, in their tasks: always applied
            assert sum(sum(r["kept_rows"]) for r in rows) < len(frame)  # some rows had no partner
        validate_theta(
            StageContext.of(spark, settings, SOURCE, job), T, T + 3 * W, sample=3
        )  # = DuckDB on the raw rows
    with pytest.raises(ConfigError, match="equi-join"):
        ThetaJob(prefilter="mcf")  # a band is not an equi-join


def test_bad_jobs_and_intervals_fail_clearly(spark, settings):
    with pytest.raises(ConfigError, match="chained predicates"):
        ThetaJob(streams=("a", "b", "c"), predicates=("<",))
    with pytest.raises(ConfigError, match="--column must be one of value, x, y, z, event_ts"):
        ThetaJob(column="speed")
    with pytest.raises(ConfigError, match="multiples of the window"):
        run_interval(StageContext.of(spark, settings, SOURCE, JOB), T + 1, T + W)


def test_a_users_files_are_joined_and_unparsable_values_counted(spark, tmp_path):
    rng = np.random.default_rng(3)
    a = pd.DataFrame({"v": rng.integers(0, 20, 40).astype(float).astype(str)})
    a.loc[3, "v"] = "n/a"  # does not parse: excluded and counted
    b = pd.DataFrame({"v": rng.integers(0, 20, 30).astype(float)})
    a.to_csv(tmp_path / "a.csv", index=False)
    b.to_parquet(tmp_path / "b.parquet")
    out = tmp_path / "out"
    summary = join_files(spark, [tmp_path / "a.csv", tmp_path / "b.parquet"], "v", [">="], out=str(out))
    assert summary.excluded == {"a.csv": 1}  # counted, not joined as anything
    got = sorted(tuple(r) for r in spark.read.parquet(str(out)).select("a_row", "b_row").collect())
    av = pd.to_numeric(a["v"], errors="coerce").to_numpy()
    want = sorted((i, j) for i in range(len(av)) for j in range(len(b)) if av[i] >= b["v"][j])
    assert got == want and summary.result_rows == len(want)
    argv = ["theta-join", "--file", str(tmp_path / "a.csv"), "--file", str(tmp_path / "b.parquet")]
    assert main([*argv, "--column", "v", "--predicates", ">="]) == 0  # the same through the CLI
    assert main(["theta-join", "--file", str(tmp_path / "a.csv"), "--column", "v", "--predicates", ""]) == 2
