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
        (["join-stream", *SRC, "--window-ms", "inf"], "--window-ms"),
        (["join-stream", *SRC, "--window-ms", "nan"], "--window-ms"),
        (["join-stream", *SRC, "--period-s", "1e300"], "--period-s"),
        (["join-stream", *SRC, "--theta", "-inf"], "--theta"),
        (["join-stream", *SRC, "--every-s", "nan"], "--every-s"),
        (["join-stream", *SRC, "--every-s", "0"], "--every-s"),  # ran a single interval
        (["join-stream", *SRC, "--every-s", "-60"], "--every-s"),
        (["join-stream", *SRC, "--adapt-every-s", "inf"], "--adapt-every-s"),
        (["join-repair", *SRC, "--until", "1", "--span-s", "0"], "--span-s"),  # meant the whole history
        (["aggregate-stream", *SRC, "--every-s", "1e12"], "--every-s"),
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
    # documented values: --adapt-every-s 0 never adapts, --speed 0 sends as fast as possible
    parser = build_parser()
    assert parser.parse_args(["join-stream", *SRC, "--adapt-every-s", "0"]).adapt_every_s == 0
    assert parser.parse_args(["produce", *SRC, "--topic", "t", "--speed", "0"]).speed == 0
    assert parser.parse_args(["join-stream", *SRC, "--every-s", "60"]).every_s == 60


def test_the_dag_params_path_refuses_the_same_values():
    for value in (float("inf"), float("nan"), 1e300, True):
        with pytest.raises(ConfigError, match="--window-ms takes a finite number"):
            JoinJob.from_options({"window_ms": value})
    assert JoinJob.from_options({"window_ms": 250}).window_us == 250_000


@pytest.mark.parametrize(
    "stage", [["join-stream"], ["validate-join", "--until", "1"], ["join-adapt", "--until", "1"]]
)
def test_a_stream_named_in_both_r_and_s_is_refused_before_anything_runs(stage, capsys):
    # it silently went to R: a join of a stream with itself, judged green
    argv = [*stage, *SRC, "--r-streams", "ball,team_a", "--s-streams", "team_a,team_b"]
    assert exit_code(argv) == 2
    assert "stream 'team_a' is named in both R and S" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="both R and S"):
        JoinJob.from_options({"r_streams": "a", "s_streams": "a"})
