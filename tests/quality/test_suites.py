"""The suite catalogue: every suite builds with its targets, and bad requests say what is wrong."""

from __future__ import annotations

import pytest

from outoforder.errors import ConfigError
from outoforder.quality.suites import CHECKPOINTS, SUITES, expectations

PARAMS = {
    "columns": ["a"], "event_lo": 0, "event_hi": 1, "streams": ["ball"], "q_user": 0.9, "delta": 0.05,
    "eps_min": 0.95, "periods_met": 0.95,
}  # fmt: skip


def test_every_suite_is_in_its_checkpoint_and_builds():
    assert set(CHECKPOINTS) == {"bronze", "join", "aggregate", "topk", "theta"}
    for name, suite in SUITES.items():
        assert suite in CHECKPOINTS[suite.checkpoint]
        assert len(suite.meaning) > 30  # the report shows it to readers who have not read the papers
        built = expectations(name, **PARAMS)
        assert built and all(type(e).__module__.startswith("great_expectations") for e in built)


def test_targets_reach_the_expectations():
    (recall,) = expectations("join_recall", q_user=0.87, periods_met=0.9)
    assert recall.min_value == 0.87 and recall.mostly == 0.9
    (accuracy,) = expectations("topk_accuracy", eps_min=0.9)
    assert accuracy.min_value == 0.9
    (within,) = expectations("agg_error", delta=0.1)
    assert within.mostly == pytest.approx(0.9)
    (bound,) = expectations("agg_feasibility", delta=0.1)
    assert bound.mostly == pytest.approx(0.9)


def test_unknown_suite_and_missing_target_are_clear_errors():
    with pytest.raises(ConfigError, match="unknown quality suite 'nope'"):
        expectations("nope")
    with pytest.raises(ConfigError, match="suite 'join_recall' needs the parameter 'q_user'"):
        expectations("join_recall")


def test_a_target_out_of_reach_under_the_bound_warns_and_anything_else_still_fails():
    from outoforder.errors import QualityError
    from outoforder.quality.checkpoints import SuiteResult, conclude

    def res(suite, ok):
        return SuiteResult(suite, ok, [("check", ok, "")])

    conclude(
        [res("topk_completeness", True), res("topk_accuracy", False), res("topk_feasibility", False)],
        "t",
        True,
    )
    with pytest.raises(QualityError, match="topk_accuracy"):  # reachable, and missed: the controller's
        conclude([res("topk_accuracy", False), res("topk_feasibility", True)], "t", True)
    with pytest.raises(QualityError, match="topk_completeness"):  # the bound explains accuracy only
        conclude([res("topk_completeness", False), res("topk_feasibility", False)], "t", True)
    conclude([res("join_recall", True), res("join_feasibility", False)], "j", True)
