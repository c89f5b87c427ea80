"""Nothing runs green on nothing: a misspelt source or stream, or a check of a job that never ran, fails
naming what it looked for and what the lake has; values the aggregates cannot use are counted."""

import numpy as np
import pandas as pd
import pytest

from outoforder.errors import EXIT_NOTHING_YET, InputError, NothingYet, StateError
from outoforder.stages.aggregate import validate as aggregate_validate
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.context import StageContext
from outoforder.stages.join import validate as join_validate
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import JoinStream
from outoforder.stages.topk import validate as topk_validate
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import TopKStream

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/yard"
T0 = 1_700_000_000_000_000
AGG = AggJob(window_us=50_000, slide_us=10_000, coverage_horizon_us=100_000, initial_k_us=20_000)


@pytest.fixture
def yard(load_bronze):
    n = 60
    value = np.arange(n, dtype=float)
    value[[3, 7]] = np.nan
    frame = pd.DataFrame({
        "stream": np.where(np.arange(n) % 2, "forklift", "picker"), "event_ts": T0 + np.arange(n) * 1_000,
        "x": 1.0, "y": 1.0, "value": value,
    })  # fmt: skip
    frame.loc[10, "value"] = None
    load_bronze(frame, SOURCE, t0=T0)


def test_a_misspelt_source_fails_naming_the_sources_there_are(spark, settings, yard):
    with pytest.raises(
        InputError,
        match=r"no rows of source 'test/yrad' \(its sources: test/yard; did you mean 'test/yard'\?\)",
    ):
        AggregateStream(StageContext.of(spark, settings, "test/yrad", AGG)).run()


def test_a_scheduled_run_of_a_source_without_input_yet_is_skipped_saying_what_there_is(
    spark, settings, yard, tmp_path
):
    # a stream DAG unpaused before its stream started: its runs are skipped, not failed (its stream
    # may yet come), and each says what bronze has, so a misspelt source still shows
    ctx = StageContext.of(spark, settings, "test/yrad", AGG)
    with pytest.raises(NothingYet, match=r"no rows of source 'test/yrad' .*did you mean 'test/yard'"):
        AggregateStream(ctx).run(T0, T0 + 60_000_000, catch_up=True)
    from outoforder.stages.cli import main

    cfg = tmp_path / "lake.toml"
    cfg.write_text(f'[lake]\nroot = "{settings.lake_root}"\n')
    start, end = str(T0), str(T0 + 60_000_000)
    args = ["join-stream", "--config", str(cfg), "--source", "test/yrad", "--r-streams", "forklift"]
    args += ["--s-streams", "picker"]
    assert main([*args, "--start", start, "--end", end, "--catch-up"]) == EXIT_NOTHING_YET
    assert main([*args, "--start", start, "--end", end]) == 2  # asked by hand: an error, as above


def test_a_join_side_without_rows_fails_naming_the_streams_there_are(spark, settings, yard):
    job = JoinJob(r_streams=("forklift",), s_streams=("pickers",))
    with pytest.raises(
        InputError,
        match=r"no rows of S = 'pickers' \(its streams: forklift, picker; did you mean 'picker'\?\)",
    ):
        JoinStream(StageContext.of(spark, settings, SOURCE, job)).run()


def test_checks_of_a_job_that_never_ran_fail(spark, settings, yard):
    AggregateStream(StageContext.of(spark, settings, SOURCE, AGG)).run()
    join = JoinJob(r_streams=("forklift",), s_streams=("picker",))
    with pytest.raises(StateError, match=r"has not run by \d+: nothing to check"):
        join_validate.validate_join(StageContext.of(spark, settings, SOURCE, join), T0 + 10**9)
    topk = TopKJob(score="value")  # its 4 s windows: none closes in these 60 ms
    TopKStream(StageContext.of(spark, settings, SOURCE, topk)).run()
    expected = (
        r"validate-topk: nothing to judge: job tk-\w+ has processed 'test/yard' up to \d+ µs and no window"
    )
    with pytest.raises(InputError, match=expected):
        topk_validate.validate_topk(StageContext.of(spark, settings, SOURCE, topk))
    other = AggJob(window_us=100_000, slide_us=10_000, coverage_horizon_us=100_000, initial_k_us=20_000)
    with pytest.raises(InputError, match=rf"jobs on this lake: {AGG.job_id()} on 'test/yard' up to \d+"):
        aggregate_validate.validate_aggregate(StageContext.of(spark, settings, SOURCE, other))


def test_values_the_aggregates_cannot_use_are_counted(spark, settings, yard):
    summary = AggregateStream(StageContext.of(spark, settings, SOURCE, AGG)).run()
    assert summary is not None and summary.unvalued == 3 and summary.arrivals == 57
    assert "3 without a value (not aggregated)" in summary.line()
