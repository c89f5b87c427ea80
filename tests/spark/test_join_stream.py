"""The stream-join stage over arrival intervals: equal to the set form, idempotent, ordered, checked."""

import json
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from outoforder.core.joins.metrics import period_recall
from outoforder.core.joins.progress import joint_progress
from outoforder.core.joins.qjoin import qjoin_set
from outoforder.core.joins.query import exact_join
from outoforder.errors import QualityError, StateError
from outoforder.io import delta
from outoforder.io.tables import JOIN_METRICS, JOIN_PARAMS, JOIN_RESULTS, JOIN_STATE
from outoforder.sources.disorder import inject
from outoforder.stages.cli import main
from outoforder.stages.context import StageContext
from outoforder.stages.join import adapt as join_adapt
from outoforder.stages.join.adapt import adapt
from outoforder.stages.join.inputs import input_from_frame
from outoforder.stages.join.repair import repair
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import run_interval
from outoforder.stages.join.validate import period_quality, validate_join

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/join-stream"
JOB = JoinJob(s_streams=("team_a",), window_us=50_000, theta=3.0, period_us=1_000_000, interval_us=200_000)
T0 = 1_700_000_000_000_000  # arrival clock of the test stream (µs)
STEP = 1_000  # one arrival per ms


def arrivals(n=1_500, seed=3):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 1_500_000, n)) + 10_000_000_000
    stream = np.where(rng.random(n) < 0.4, "ball", "team_a")
    x, y = rng.uniform(0, 12, n), rng.uniform(0, 12, n)
    o = inject(ts, "lognormal:mu=-4,sigma=1.2,late_prob=0.5", seed).order
    return pd.DataFrame({"stream": stream[o], "event_ts": ts[o], "x": x[o], "y": y[o]})


def result_pairs(spark, settings):
    df = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(F.col("job") == JOB.job_id())
    return df.select("r_seq", "s_seq", "d_r_us", "params_version").toPandas()


def test_intervals_with_adaptation_equal_the_set_form_and_reruns_change_nothing(spark, settings, load_bronze):
    frame = arrivals()
    load_bronze(frame, SOURCE, 1)
    n = len(frame)
    bounds = [T0, T0 + 400 * STEP, T0 + 900 * STEP, T0 + 1_200 * STEP, T0 + n * STEP]
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    run_interval(ctx, bounds[0], bounds[1])
    run_interval(ctx, bounds[1], bounds[2])
    params = adapt(ctx, bounds[2])
    for lo, hi in pairwise(bounds[2:]):
        run_interval(ctx, lo, hi)

    # the set form under the same retention schedule: before the adaptation each interval keeps
    # its whole length (nothing dropped without evidence), then the adaptation's choice
    inp = input_from_frame(frame, JOB)
    idx = np.arange(n)
    initial = np.where(idx < 400, 400 * STEP, 500 * STEP)
    d_r = np.where(idx >= 900, params["d_r_us"], initial).astype(np.int64)
    d_s = np.where(idx >= 900, params["d_s_us"], initial).astype(np.int64)
    expected = qjoin_set(inp, JOB.query(), d_r, d_s)
    got = result_pairs(spark, settings)
    assert sorted(zip(got["r_seq"] - 1, got["s_seq"] - 1, strict=True)) == [
        tuple(p) for p in expected.pairs.tolist()
    ]
    assert len(expected.pairs) > 100
    # provenance: the retention and parameter version in force when each pair was produced
    assert set(got["params_version"]) <= {-1, bounds[2]}
    assert (got.loc[got["params_version"] == bounds[2], "d_r_us"] == params["d_r_us"]).all()
    assert set(got.loc[got["params_version"] == -1, "d_r_us"]) <= {400 * STEP, 500 * STEP}
    params_row = delta.read(spark, JOIN_PARAMS, settings.lake_root).collect()
    assert len(params_row) == 1 and "n_true_p" in params_row[0]["stats_json"]

    # re-running an interval already processed (and the adaptation) leaves every table as it was
    before = got.sort_values(["r_seq", "s_seq"]).reset_index(drop=True)
    adapt(ctx, bounds[2])
    s = run_interval(ctx, bounds[1], bounds[2])
    assert s.new_pairs == 0
    after = result_pairs(spark, settings).sort_values(["r_seq", "s_seq"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(before, after)
    assert delta.read(spark, JOIN_PARAMS, settings.lake_root).count() == 1
    last = delta.read(spark, JOIN_STATE, settings.lake_root).orderBy(F.col("as_of_us").desc()).first()
    assert last["arrivals"] == n and last["pairs"] == len(expected.pairs)


def test_each_adaptation_remembers_what_its_earlier_decisions_measured(spark, settings, load_bronze):
    # the memory of older periods' needs comes from the parameters table, not from re-reading
    # their arrivals: each decision keeps the largest need it measured (of the period in progress
    # and the complete one before it) or found in the rows of the decisions made in the memory's
    # older periods
    load_bronze(arrivals(), SOURCE, 1)
    job = JoinJob(**{**JOB.__dict__, "period_us": 200_000, "interval_us": 100_000, "memory_periods": 4})
    ctx = StageContext.of(spark, settings, SOURCE, job)
    run_interval(ctx, T0, T0 + 1_500 * STEP)
    rows = [adapt(ctx, T0 + k * 150 * STEP) for k in range(2, 10)]
    stats = [json.loads(r["stats_json"]) for r in rows]
    older = 0
    for i, (row, st) in enumerate(zip(rows, stats, strict=True)):
        now = row["progress_us"]
        since = now - (job.memory_periods - 2) * job.period_us
        earlier = [
            s["measured_need_us"]
            for r, s in zip(rows[:i], stats, strict=False)
            if since <= r["progress_us"] < now and "measured_need_us" in s
        ]
        assert st["remembered_us"] == max([st["current_need_us"], st["previous_need_us"], *earlier])
        older += st["remembered_us"] > max(st["current_need_us"], st["previous_need_us"])
    assert older  # some decision kept a need it no longer measured itself
    # the decisions hand their previous period on once it lies wholly after the stream's start
    handed = ["measured_need_us" in st for st in stats]
    assert handed == sorted(handed) and handed[-1]


def test_an_interval_cannot_skip_unprocessed_arrivals(spark, settings, load_bronze):
    load_bronze(arrivals(n=300), SOURCE, 1)
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    run_interval(ctx, T0, T0 + 100 * STEP)
    with pytest.raises(StateError, match="run \\["):
        run_interval(ctx, T0 + 200 * STEP, T0 + 300 * STEP)
    with pytest.raises(StateError, match="starts at"):
        run_interval(ctx, T0 - 100 * STEP, T0)


def test_recall_check_fails_or_warns_and_finds_no_duplicates(spark, settings, capsys, load_bronze):
    frame = arrivals()
    load_bronze(frame, SOURCE, 1)
    end = T0 + len(frame) * STEP
    # d = 0 under disorder (never adapted): 1.0 is out of reach; short periods so that several are closed
    strict = JoinJob(
        **{
            **JOB.__dict__,
            "q_user": 1.0,
            "period_us": 300_000,
            "interval_us": 100_000,
            "initial_retention_us": 0,
        }
    )
    cuts = [T0, T0 + 500 * STEP, T0 + 1_000 * STEP, end]
    ctx = StageContext.of(spark, settings, SOURCE, strict)
    for lo, hi in pairwise(cuts):
        run_interval(ctx, lo, hi)
    with pytest.raises(QualityError, match="stream join"):
        validate_join(ctx, end)
    suites = validate_join(ctx, end, fail=False)
    assert [s.success for s in suites] == [True, False]  # no duplicates; recall below target
    judged = period_quality(ctx, end)
    n_stored = delta.read(spark, JOIN_RESULTS, settings.lake_root).count()
    assert judged.stored["stored_rows"].sum() == judged.stored["distinct_pairs"].sum() == n_stored
    metrics = delta.read(spark, JOIN_METRICS, settings.lake_root).toPandas()
    assert len(metrics) >= 2 and (metrics["method"] == f"stream:{strict.job_id()}").all()
    assert (metrics["recall"] < 1.0).any()

    # the check runs in Spark and equals the numpy definitions over the history
    inp = input_from_frame(frame, strict)
    stored = delta.read(spark, JOIN_RESULTS, settings.lake_root).select("r_seq", "s_seq").toPandas()
    produced = stored.to_numpy(np.int64).reshape(-1, 2) - 1  # bronze numbers arrivals from 1
    periods = period_recall(inp, exact_join(inp, strict.query()), produced, strict.period_us, strict.q_user)
    t_end = int(joint_progress(inp)[-1])
    want = [(p.period, p.true_pairs, p.produced_pairs) for p in periods if p.start_us + 2 * 300_000 <= t_end]
    full = period_quality(ctx, end).frame
    assert [tuple(r) for r in full[["period", "true_pairs", "produced_pairs"]].to_numpy().tolist()] == want
    # a run over a data interval judges the periods closed in it, as a check of everything then would
    then = period_quality(ctx, cuts[1]).frame
    judged, closed_before = then["period"].tolist(), set(then["period"])
    for since, until in pairwise(cuts[1:]):
        part = period_quality(ctx, until, since).frame
        then = full if until == end else period_quality(ctx, until).frame
        fresh = then[~then["period"].isin(closed_before)]
        assert part.to_dict("records") == fresh.to_dict("records")
        judged += part["period"].tolist()
        closed_before |= set(then["period"])
    assert judged == full["period"].tolist()
    # the repair adds exactly the missing true pairs: recall becomes exact, and a re-run adds none
    fixed = repair(ctx, end)
    assert fixed.added == fixed.missing > 0
    assert repair(ctx, end).added == 0
    assert all(s.success for s in validate_join(ctx, end))
    res = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(F.col("produced_by") == "repair")
    assert res.count() == fixed.added
    # a pair stored twice fails the duplicate check, of a full run and of a run over the interval judging it
    seqs = period_quality(ctx, end, cuts[2]).seqs
    assert seqs is not None
    twice = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(
        F.col("r_seq").between(*seqs) & F.col("s_seq").between(*seqs)
    )
    twice.limit(1).write.format("delta").mode("append").save(JOIN_RESULTS.path(settings.lake_root))
    for since in (None, cuts[2]):
        suites = validate_join(ctx, end, fail=False, since_us=since)
        assert [s.success for s in suites] == [False, True]


def test_a_run_killed_before_an_adaptation_adapts_when_resumed_like_an_uninterrupted_run(
    spark, settings, tmp_path, monkeypatch, load_bronze, capsys
):
    # the reliability run found it: killed between an interval's commits and the adaptation after
    # it, the resumed run started past that adaptation time and kept the older retention
    import shutil
    from pathlib import Path

    load_bronze(arrivals(n=600), SOURCE, 1)
    calm = tmp_path / "uninterrupted"
    shutil.copytree(settings.lake_root, calm)

    def command(lake):
        cfg = tmp_path / f"{Path(lake).name}.toml"
        cfg.write_text(f'[lake]\nroot = "{lake}"\n')
        args = ["join-stream", "--config", str(cfg), "--source", SOURCE, "--s-streams", "team_a"]
        args += ["--window-s", "0.05", "--theta", "3", "--period-s", "1", "--interval-s", "0.2"]
        return [*args, "--every-s", "0.2"]  # the stage adapts at the job's L (0.2 s) without a flag

    def tables(lake):
        params = delta.read(spark, JOIN_PARAMS, lake).select("valid_from_us", "d_r_us", "d_s_us").toPandas()
        pairs = delta.read(spark, JOIN_RESULTS, lake).select("r_seq", "s_seq", "d_r_us", "params_version")
        return [t.sort_values(list(t.columns)).reset_index(drop=True) for t in (params, pairs.toPandas())]

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stands in for the SIGKILL: nothing after it runs

    adapt_for_real = join_adapt.adapt
    monkeypatch.setattr(join_adapt, "adapt", killed)
    with pytest.raises(KeyboardInterrupt):
        main(command(settings.lake_root))
    monkeypatch.setattr(join_adapt, "adapt", adapt_for_real)
    assert delta.read(spark, JOIN_PARAMS, settings.lake_root).count() == 0  # one interval done, no adaptation

    assert main(command(settings.lake_root)) == 0  # resumes after the first interval
    assert main(command(calm)) == 0

    got, want = tables(settings.lake_root), tables(calm)
    assert len(want[0]) == 2  # adaptations after 0.2 s and 0.4 s
    for g, w in zip(got, want, strict=True):
        pd.testing.assert_frame_equal(g, w)

    # the validation from the command line: 0.6 s of stream close no period of 1 s, and a check
    # that judged nothing is not a pass; a span that ends before it starts is refused
    validate_args = command(calm)[1:-2]  # the job's options, without the interval cadence
    validate_args += ["--until", str(T0 + 600 * STEP), "--on-violation", "warn"]
    assert main(["validate-join", *validate_args]) == 2
    assert "validate-join: nothing to judge: job qj-" in capsys.readouterr().err
    assert main([*command(calm), "--start", str(T0 + 600 * STEP), "--end", str(T0)]) == 2


def test_a_retention_bound_that_puts_q_user_out_of_reach_is_reported_not_failed(spark, settings, load_bronze):
    source = "test/join-bound"
    frame = arrivals(seed=4)
    load_bronze(frame, source, 1)
    end = T0 + len(frame) * STEP
    # no retention at all under this disorder: the late pairs are out of reach
    bounded = JoinJob(**{**JOB.__dict__, "period_us": 300_000, "interval_us": 100_000, "latency_bound_us": 0})
    cuts = [T0 + c * STEP for c in (0, 400, 700, 1_000)] + [end]
    run_interval(StageContext.of(spark, settings, source, bounded), cuts[0], cuts[1])
    for lo, hi in pairwise(cuts[1:]):
        row = adapt(StageContext.of(spark, settings, source, bounded), lo)
        assert row["d_r_us"] == row["d_s_us"] == 0  # capped at the bound
        run_interval(StageContext.of(spark, settings, source, bounded), lo, hi)
    stated = [
        json.loads(r["stats_json"])
        for r in delta.read(spark, JOIN_PARAMS, settings.lake_root).where(F.col("source") == source).collect()
    ]
    assert min(s["reachable"] for s in stated) < bounded.q_user < max(s["needed_us"] for s in stated) + 1
    # failing is on, and nothing raises: the misses are the bound's, said by join_feasibility
    suites = {
        s.suite: s.success
        for s in validate_join(StageContext.of(spark, settings, source, bounded), end, fail=True)
    }
    assert suites["join_feasibility"] is False and suites["join_results"] is True
    assert suites["join_recall"] is True  # the periods the bound allowed met Q_user (or none was left)
    # without the bound's statement the same stream's misses are the controller's: a failure
    unbounded = JoinJob(**{**bounded.__dict__, "latency_bound_us": None})
    assert unbounded.job_id() == bounded.job_id()  # the bound is a setting of the running job
    with pytest.raises(QualityError, match="stream join"):
        validate_join(StageContext.of(spark, settings, source, unbounded), end, fail=True)
