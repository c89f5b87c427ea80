"""A check's judged position (``--from-judged``): nothing closes unjudged, nothing is judged twice.

No Spark: the position is a small Delta table read and written on the driver; the check itself is
the body of :func:`~outoforder.stages.positions.judging`.
"""

from __future__ import annotations

import argparse

import pytest

from outoforder.errors import CheckFailed, StateError
from outoforder.stages.context import StageContext
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.positions import failed_until, judged_until, judging


def args(since, until, from_judged=True):
    return argparse.Namespace(since=since, until=until, from_judged=from_judged, run_name="r")


def check(ctx, a, raises=None):
    """One check run: the range it judged, and the position after it."""
    judged = None
    if raises is None:
        with judging(ctx, a) as judged:
            pass
    else:
        with pytest.raises(type(raises)), judging(ctx, a) as judged:
            raise raises
    return judged, judged_until(ctx)


@pytest.fixture
def ctx(settings):
    return StageContext("validate-join", settings, "game/s", JoinJob())


def test_runs_judge_from_where_the_last_verdict_stopped_failed_or_not(ctx):
    assert judged_until(ctx) is None
    assert check(ctx, args("100", "200")) == ((100, 200), 200)
    # a failed verdict judged its periods: the next run does not judge them again
    assert check(ctx, args("200", "300"), CheckFailed("recall")) == ((200, 300), 300)
    assert check(ctx, args("300", "400")) == ((300, 400), 400)
    # the scheduler skipped two intervals: the next run covers them
    assert check(ctx, args("600", "700")) == ((400, 700), 700)
    # a run that stopped before its verdict leaves its interval to the next run
    assert check(ctx, args("700", "800"), StateError("killed")) == ((700, 800), 700)
    assert check(ctx, args("800", "900")) == ((700, 900), 900)


def test_a_range_by_hand_or_a_backfill_judges_exactly_its_range_and_never_moves_the_position_back(ctx):
    check(ctx, args("100", "200"))
    # a backfill of earlier intervals
    assert check(ctx, args("0", "100", from_judged=False)) == ((0, 100), 200)
    # a later range by hand leaves a gap: judged, but the position stays before the gap
    assert check(ctx, args("500", "600", from_judged=False)) == ((500, 600), 200)
    # a rerun of a judged interval (a cleared task) judges it again
    assert check(ctx, args("100", "200")) == ((100, 200), 200)
    # another job of the same check keeps its own position
    other = StageContext(ctx.name, ctx.settings, ctx.source, JoinJob(q_user=0.9))
    assert judged_until(other) is None


def test_the_newest_failed_verdict_is_kept_and_never_moves_back(ctx):
    assert failed_until(ctx) is None
    check(ctx, args("100", "200"))
    assert failed_until(ctx) is None  # passed verdicts leave it
    check(ctx, args("200", "300"), CheckFailed("recall"))
    assert failed_until(ctx) == 300 and judged_until(ctx) == 300
    check(ctx, args("300", "400"))
    assert failed_until(ctx) == 300
    check(ctx, args("400", "500"), StateError("killed"))  # no verdict: not a failed one
    assert failed_until(ctx) == 300
    check(ctx, args("0", "100", from_judged=False), CheckFailed("recall"))  # a backfill's failure
    assert failed_until(ctx) == 300
    check(ctx, args("400", "600"), CheckFailed("recall"))
    assert failed_until(ctx) == 600 and judged_until(ctx) == 600
