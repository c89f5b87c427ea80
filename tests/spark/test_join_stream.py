"""The stream-join stage: one pass per run, the same rows whatever the cadence, idempotent, checked."""

import json
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from outoforder.core.joins.adaptive import AdaptiveQJoin
from outoforder.core.joins.metrics import period_recall
from outoforder.core.joins.progress import joint_progress
from outoforder.core.joins.query import exact_join
from outoforder.errors import InputError, QualityError, StateError
from outoforder.io import delta, deltalog, figures
from outoforder.io.tables import JOIN_METRICS, JOIN_PARAMS, JOIN_RESULTS, JOIN_STATE, VOLATILE_COLUMNS
from outoforder.sources.disorder import inject
from outoforder.stages.cli import main
from outoforder.stages.context import StageContext
from outoforder.stages.join.inputs import input_from_frame
from outoforder.stages.join.repair import repair
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import JoinStream
from outoforder.stages.join.validate import period_quality, validate_join
from tests.conftest import MINUTE_ARRIVALS

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/join-stream"
JOB = JoinJob(s_streams=("team_a",), window_us=50_000, theta=3.0, period_us=400_000, interval_us=100_000)
T0 = 1_700_000_000_000_000  # arrival clock of the test stream (µs)
STEP = 1_000  # one arrival per ms


def arrivals(n=1_500, seed=3):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 1_500_000, n)) + 10_000_000_000
    stream = np.where(rng.random(n) < 0.4, "ball", "team_a")
    x, y = rng.uniform(0, 12, n), rng.uniform(0, 12, n)
    o = inject(ts, "lognormal:mu=-4,sigma=1.2,late_prob=0.5", seed).order
    return pd.DataFrame({"stream": stream[o], "event_ts": ts[o], "x": x[o], "y": y[o]})


def rows(spark, lake, table, where=None):
    """A table's rows without the columns that say when or in how many runs they were written."""
    df = delta.read(spark, table, lake)
    if where is not None:
        df = df.where(where)
    frame = df.drop(*(c for c in df.columns if c in VOLATILE_COLUMNS)).toPandas()
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def newest_state(spark, lake):
    last = delta.read(spark, JOIN_STATE, lake).agg(F.max("as_of_us")).first()[0]
    return rows(spark, lake, JOIN_STATE, F.col("as_of_us") == last)


def test_any_cadence_gives_the_rows_of_one_pass_and_of_the_operator(spark, settings, run_at_cadences):
    # one run, runs of a scheduler's minute, of random lengths, and with a run killed
    # between its results and its state: the same pairs, decisions and state
    frame = arrivals()
    n = len(frame)
    lakes = run_at_cadences(JoinStream, JOB, frame, SOURCE, seed=5, n_random=6, first_seq=1)
    want = {t: rows(spark, lakes["one"], t) for t in (JOIN_RESULTS, JOIN_PARAMS)}
    want_state = newest_state(spark, lakes["one"])
    assert len(want[JOIN_RESULTS]) > 1_000 and len(want[JOIN_PARAMS]) >= 10
    for name, lake in lakes.items():
        for t in (JOIN_RESULTS, JOIN_PARAMS):
            pd.testing.assert_frame_equal(rows(spark, lake, t), want[t], obj=f"{name}: {t.name}")
        pd.testing.assert_frame_equal(newest_state(spark, lake), want_state, obj=f"{name}: state")
    # the killed pass's orphan commit was cleared before the pass ran again
    killed = JOIN_RESULTS.path(lakes["minutes"])
    tag = f"{SOURCE}|{JOB.job_id()}|{T0 + 2 * MINUTE_ARRIVALS * STEP}"
    assert deltalog.tagged_commits(killed, tag, -1, settings.storage)

    # the pairs and decisions are the operator's over the whole stream (bronze numbers arrivals from 1)
    inp = input_from_frame(frame, JOB)
    initial = JOB.initial_retention()
    out = AdaptiveQJoin(JOB.query(), JOB.adaptation(), (initial, initial)).process(np.arange(1, n + 1), inp)
    got = want[JOIN_RESULTS]
    assert sorted(zip(got["r_seq"], got["s_seq"], strict=True)) == [tuple(p) for p in out.pairs.tolist()]
    params = want[JOIN_PARAMS].sort_values("valid_from_seq")
    assert params["valid_from_seq"].tolist() == [a.at_index for a in out.decisions]
    assert params["d_r_us"].tolist() == [a.d_r_us for a in out.decisions]
    assert set(got["params_version"]) <= {-1, *params["valid_from_seq"]}
    state = want_state[want_state["kind"] == "state"].iloc[0]
    assert state["arrivals"] == n and state["pairs"] == len(out.pairs)

    # a run over arrivals the job has processed writes nothing
    ctx = StageContext.of(spark, replace(settings, lake_root=lakes["one"]), SOURCE, JOB)
    before = deltalog.newest_version(JOIN_RESULTS.path(lakes["one"]))
    assert JoinStream(ctx).run(T0, T0 + 700 * STEP) is None
    assert deltalog.newest_version(JOIN_RESULTS.path(lakes["one"])) == before


def test_a_pass_cannot_skip_arrivals_but_a_scheduled_run_catches_up(spark, settings, load_bronze):
    load_bronze(arrivals(n=300), SOURCE, 1)
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    first = JoinStream(ctx).run(T0, T0 + 100 * STEP)
    assert first is not None and (first.start_us, first.end_us) == (T0, T0 + 100 * STEP)
    with pytest.raises(StateError, match="would skip"):
        JoinStream(ctx).run(T0 + 200 * STEP, T0 + 250 * STEP)
    caught = JoinStream(ctx).run(T0 + 200 * STEP, T0 + 250 * STEP, catch_up=True)  # from where it stands
    assert caught is not None and (caught.start_us, caught.end_us) == (T0 + 100 * STEP, T0 + 250 * STEP)
    assert caught.arrivals == 150
    with pytest.raises(InputError, match="empty span"):
        JoinStream(ctx).run(T0 + 300 * STEP, T0)


def test_a_distance_join_refuses_tuples_without_a_location_and_writes_nothing(spark, settings, load_bronze):
    frame = arrivals(n=200)
    frame.loc[[5, 17], "x"] = np.nan
    load_bronze(frame, SOURCE, 1)
    ctx = StageContext.of(spark, settings, SOURCE, JOB)
    with pytest.raises(InputError, match=r"2 arrivals of test/join-stream .* have no x/y"):
        JoinStream(ctx).run(T0, T0 + 200 * STEP)
    assert not delta.exists(spark, JOIN_RESULTS, settings.lake_root) or not (
        delta.read(spark, JOIN_RESULTS, settings.lake_root).count()
    )
    assert JoinStream(ctx).position() is None


def test_recall_check_fails_or_warns_and_finds_no_duplicates(
    spark, settings, load_bronze, monkeypatch, tmp_path
):
    frame = arrivals()
    load_bronze(frame, SOURCE, 1)
    end = T0 + len(frame) * STEP
    # d = 0 under disorder, the target out of reach: 1.0; short periods so that several are closed
    strict = JoinJob(**{**JOB.__dict__, "q_user": 1.0, "period_us": 300_000, "latency_bound_us": None})
    strict = replace(strict, initial_retention_us=0, headroom=0.0)
    cuts = [T0, T0 + 500 * STEP, T0 + 1_000 * STEP, end]
    every_period = replace(settings, quality=replace(settings.quality, periods_met=1.0))
    ctx = StageContext.of(spark, every_period, SOURCE, strict)
    monkeypatch.setenv(figures.ENV, str(tmp_path / "figures.json"))  # as the DAG's task asks
    for lo, hi in pairwise(cuts):
        JoinStream(ctx).run(lo, hi, catch_up=True)
    written = figures.read(tmp_path / "figures.json")  # the last run's, per table it wrote
    assert written[JOIN_RESULTS.name]["start_us"] == cuts[-2] and written[JOIN_RESULTS.name]["rows"] > 0
    # the promise as a share of periods: a budget of misses, one in twenty at the default 0.95
    share = StageContext.of(spark, settings, SOURCE, strict)
    closed = period_quality(share, end).frame
    misses, n = int((~closed["met"].astype(bool)).sum()), len(closed)
    verdict = {s.suite: s.success for s in validate_join(share, end, fail=False)}
    assert verdict["join_recall"] is (misses <= int(0.05 * max(n, 20) + 1e-9))
    # the verdict for the results' asset event: graded, and the run's pass or fail
    judged_figures = figures.read(tmp_path / "figures.json")[JOIN_RESULTS.name]
    assert (judged_figures["items"], judged_figures["met"]) == (n, n - misses)
    assert judged_figures["passed"] is verdict["join_recall"] and judged_figures["judged"] == "join_recall"
    suites = validate_join(ctx, end, fail=False)
    judged = period_quality(ctx, end)
    n_stored = delta.read(spark, JOIN_RESULTS, settings.lake_root).count()
    assert judged.stored["stored_rows"].sum() == judged.stored["distinct_pairs"].sum() == n_stored
    metrics = delta.read(spark, JOIN_METRICS, settings.lake_root).toPandas()
    assert len(metrics) >= 2 and (metrics["method"] == f"stream:{strict.job_id()}").all()
    if (metrics["recall"] < 1.0).any():  # the controller cannot know the future: some period misses 1.0
        assert [s.success for s in suites] == [True, False]  # no duplicates; recall below target
        with pytest.raises(QualityError, match="stream join"):
            validate_join(ctx, end)

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
    judged_periods, closed_before = then["period"].tolist(), set(then["period"])
    for since, until in pairwise(cuts[1:]):
        part = period_quality(ctx, until, since).frame
        then = full if until == end else period_quality(ctx, until).frame
        fresh = then[~then["period"].isin(closed_before)]
        assert part.to_dict("records") == fresh.to_dict("records")
        judged_periods += part["period"].tolist()
        closed_before |= set(then["period"])
    assert judged_periods == full["period"].tolist()
    # the repair adds exactly the missing true pairs: recall becomes exact, and a re-run adds none
    fixed = repair(ctx, end)
    assert fixed.added == fixed.missing > 0
    assert repair(ctx, end).added == 0
    assert all(s.success for s in validate_join(ctx, end))
    res = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(F.col("produced_by") == "repair")
    assert res.count() == fixed.added
    # a pair stored twice fails the duplicate check, of a full run and of a run over the interval judging it
    judged = period_quality(ctx, end, cuts[2]).event_us
    assert judged is not None
    twice = delta.read(spark, JOIN_RESULTS, settings.lake_root).where(
        F.greatest("r_ts", "s_ts").between(judged[0], judged[1] - 1)
    )
    twice.limit(1).write.format("delta").mode("append").save(JOIN_RESULTS.path(settings.lake_root))
    for since in (None, cuts[2]):
        suites = validate_join(ctx, end, fail=False, since_us=since)
        assert [s.success for s in suites] == [False, True]


def test_the_command_line_runs_passes_and_a_check_of_nothing_is_not_a_pass(spark, settings, tmp_path, capsys,
                                                                              load_bronze):  # fmt: skip
    load_bronze(arrivals(n=600), SOURCE, 1)
    cfg = tmp_path / "lake.toml"
    cfg.write_text(f'[lake]\nroot = "{settings.lake_root}"\n')
    job = ["--config", str(cfg), "--source", SOURCE, "--s-streams", "team_a", "--window-s", "0.05"]
    job += ["--theta", "3", "--period-s", "1", "--interval-s", "0.2"]
    assert main(["join-stream", *job, "--end", str(T0 + 300 * STEP)]) == 0
    assert main(["join-stream", *job]) == 0  # the rest, from where the job stands
    assert main(["join-stream", *job]) == 0  # nothing new: nothing written
    assert "nothing new ingested" in capsys.readouterr().out
    state = delta.read(spark, JOIN_STATE, settings.lake_root).where(F.col("kind") == "state")
    assert sorted(r["arrivals"] for r in state.collect()) == [300, 600]
    # 0.6 s of stream close no period of 1 s: a check that judged nothing is not a pass
    until = ["--until", str(T0 + 600 * STEP), "--on-violation", "warn"]
    assert main(["validate-join", *job, *until]) == 2
    assert "validate-join: nothing to judge: job qj-" in capsys.readouterr().err
    assert main(["join-stream", *job, "--start", str(T0 + 600 * STEP), "--end", str(T0)]) == 2
    with pytest.raises(SystemExit, match="2"):  # one pass per run: no intervals to step through
        main(["join-stream", *job, "--every-s", "60"])


def test_a_retention_bound_that_puts_q_user_out_of_reach_is_reported_not_failed(spark, settings, load_bronze):
    source = "test/join-bound"
    frame = arrivals(seed=4)
    load_bronze(frame, source, 1)
    end = T0 + len(frame) * STEP
    # no retention at all under this disorder: the late pairs are out of reach
    bounded = JoinJob(**{**JOB.__dict__, "period_us": 300_000, "latency_bound_us": 0})
    ctx = StageContext.of(spark, settings, source, bounded)
    for lo, hi in pairwise([T0, T0 + 700 * STEP, end]):
        JoinStream(ctx).run(lo, hi, catch_up=True)
    params = delta.read(spark, JOIN_PARAMS, settings.lake_root).where(F.col("source") == source).collect()
    assert params and all(r["d_r_us"] == r["d_s_us"] == 0 for r in params)  # capped at the bound
    stated = [json.loads(r["stats_json"]) for r in params]
    assert min(s["reachable"] for s in stated) < bounded.q_user < max(s["needed_us"] for s in stated) + 1
    # failing is on, and nothing raises: the misses are the bound's, said by join_feasibility
    suites = {s.suite: s.success for s in validate_join(ctx, end, fail=True)}
    assert suites["join_feasibility"] is False and suites["join_results"] is True
    assert suites["join_recall"] is True  # the periods the bound allowed met Q_user (or none was left)
    # without the bound's statement the same stream's misses are the controller's: a failure
    unbounded = JoinJob(**{**bounded.__dict__, "latency_bound_us": None})
    assert unbounded.job_id() == bounded.job_id()  # the bound is a setting of the running job
    every_period = replace(settings, quality=replace(settings.quality, periods_met=1.0))
    with pytest.raises(QualityError, match="stream join"):
        validate_join(StageContext.of(spark, every_period, source, unbounded), end, fail=True)
