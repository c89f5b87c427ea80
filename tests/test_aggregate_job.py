"""The aggregate job definition: options map to the operator, ids separate jobs, no Spark needed."""

import pytest

from outoforder.errors import ConfigError
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.cli import build_parser


def test_cli_options_build_the_job_and_its_controller():
    args = build_parser().parse_args(
        [
            "aggregate-repair",
            "--source",
            "s",
            "--aggregate",
            "quantile:0.9",
            "--window-s",
            "0.25",
            "--slide-s",
            "0.05",
            "--alpha-min",
            "0.1",
            "--alpha-initial",
            "0.4",
            "--gamma-s",
            "2",
            "--streams",
            "ball,team_a",
        ]
    )
    job = AggJob.from_options(vars(args))
    assert (job.window_us, job.slide_us, job.gamma_us, job.streams) == (
        250_000,
        50_000,
        2_000_000,
        ("ball", "team_a"),
    )
    pd = job.pd_controller()
    assert (pd.alpha_min, pd.alpha_initial, pd.k_p, pd.k_d) == (0.1, 0.4, 0.2, 4.0)
    state = pd.initial()
    for _ in range(10):  # a long surplus drives α down, to the floor and no further
        state = pd.update(state, coverage=1.0, lambda_thr=0.5)
    assert state.alpha == 0.1
    assert AggJob().pd_controller().alpha_min == 0.05
    assert args.force is False
    assert build_parser().parse_args(["aggregate-repair", "--source", "s", "--force", "True"]).force is True


def test_job_ids_ignore_only_gamma():
    base = AggJob()
    assert AggJob(gamma_us=1).job_id() == base.job_id()
    assert AggJob(alpha_min=0.0).job_id() != base.job_id()
    assert AggJob(aggregate="avg").job_id() != base.job_id()


def test_bad_job_settings_fail_clearly():
    with pytest.raises(ConfigError):
        AggJob(aggregate="mode").query()
    with pytest.raises(ConfigError):
        AggJob(alpha_min=0.9, alpha_initial=0.5).pd_controller()
