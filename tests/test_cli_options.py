"""Options a user mistypes are refused before anything runs: one line naming the flag, exit 2."""

import pytest

from outoforder.errors import ConfigError
from outoforder.stages.cli import build_parser, main
from outoforder.stages.join.spec import JoinJob

SRC = ["--source", "nowhere"]


def exit_code(argv):
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["join-stream", *SRC, "--window-s", "inf"], "--window-s"),
        (["join-stream", *SRC, "--window-s", "nan"], "--window-s"),
        (["join-stream", *SRC, "--period-s", "1e300"], "--period-s"),
        (["join-stream", *SRC, "--theta", "-inf"], "--theta"),
        (["join-stream", *SRC, "--every-s", "60"], "--every-s"),  # one pass per run: no intervals
        (["topk-stream", *SRC, "--every-s", "60"], "--every-s"),
        (["join-repair", *SRC, "--until", "1", "--span-s", "0"], "--span-s"),  # meant the whole history
        (["aggregate-stream", *SRC, "--latency-bound-s", "nan"], "--latency-bound-s"),
        (["replay", "--rate", "0"], "--rate"),
        (["replay", "--seconds", "inf"], "--seconds"),
        (["produce", *SRC, "--topic", "t", "--speed", "nan"], "--speed"),
    ],
)
def test_a_non_finite_overflowing_or_meaningless_value_is_a_usage_error(argv, flag, capsys):
    assert exit_code(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and flag in err[-1] and "Traceback" not in "\n".join(err)


def test_zero_is_taken_where_it_has_a_meaning():
    # documented values: --speed 0 sends as fast as possible
    parser = build_parser()
    assert parser.parse_args(["produce", *SRC, "--topic", "t", "--speed", "0"]).speed == 0
    assert parser.parse_args(["aggregate-stream", *SRC, "--latency-bound-s", "0"]).latency_bound_s == 0


def test_the_dag_params_path_refuses_the_same_values():
    for value in (float("inf"), float("nan"), 1e300, True):
        with pytest.raises(ConfigError, match="--window-s takes a finite number"):
            JoinJob.from_options({"window_s": value})
    assert JoinJob.from_options({"window_s": 0.25}).window_us == 250_000


@pytest.mark.parametrize(
    "stage", [["join-stream"], ["validate-join", "--until", "1"], ["join-repair", "--until", "1"]]
)
def test_a_stream_named_in_both_r_and_s_is_refused_before_anything_runs(stage, capsys):
    # it silently went to R: a join of a stream with itself, judged green
    argv = [*stage, *SRC, "--r-streams", "ball,team_a", "--s-streams", "team_a,team_b"]
    assert exit_code(argv) == 2
    assert "stream 'team_a' is named in both R and S" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="both R and S"):
        JoinJob.from_options({"r_streams": "a", "s_streams": "a"})


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["join-stream", *SRC, "--window-ms", "500"], "--window-ms is now --window-s (in seconds)"),
        (["join-stream", *SRC, "--max-retention-s", "1"], "--max-retention-s is now --latency-bound-s"),
        (["aggregate-stream", *SRC, "--max-k-s", "1"], "--max-k-s is now --latency-bound-s (in seconds)"),
        (["aggregate-stream", *SRC, "--kp", "1"], "--kp is now --k-p"),
        (["topk-stream", *SRC, "--cache-s", "1"], "--cache-s is now --initial-cache-s (in seconds)"),
        (["topk-stream", *SRC, "--max-cache-s", "1"], "--max-cache-s is now --latency-bound-s"),
    ],
)
def test_a_former_flag_is_refused_naming_the_new_one(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_a_former_choice_or_param_name_is_refused_naming_the_new_one(capsys):
    assert main(["aggregate-repair", *SRC, "--controller", "seed"]) == 2
    assert "--controller 'seed' is now called 'paper'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="window_ms is now window_s"):  # a DAG run's conf, a [dags] key
        JoinJob.from_options({"window_ms": 500})


def test_the_default_jobs_keep_the_ids_their_tables_hold():
    # renamed fields keep their place in the digest: the jobs in existing lakes keep their ids
    from outoforder.stages.aggregate.spec import AggJob
    from outoforder.stages.theta.spec import ThetaJob
    from outoforder.stages.topk.spec import DEMO_JOB, TopKJob

    ids = [j.job_id() for j in (JoinJob(), AggJob(), TopKJob(), DEMO_JOB, ThetaJob())]
    assert ids == ["qj-07ef2b739a", "ag-adcfaa7314", "tk-7cef8c6b69", "tk-7ac5225aa6", "th-98a18ae310"]
    assert AggJob(window_us=50_000, slide_us=10_000).job_id() == "ag-be840c4d43"
