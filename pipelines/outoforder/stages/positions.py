"""Where a check's runs have judged up to (``gold/check_positions``), and ``--from-judged``.

A scheduled check judges what closed in its run's interval. Run times drift and the scheduler can
skip intervals, so a run starts where the check's runs last judged when that is earlier than its
interval: nothing closes unjudged between runs. The position moves when a run reaches its
verdict, passed **or failed**: a failed period or window was judged, and is reported once (a
check that judged it again on every later run would fail each of them over one bad minute). A run
that stopped before its verdict (an error, a killed task) leaves the position where it was, so its
items are judged by the next run.

The position of the newest failed verdict is kept too (:func:`failed_until`): a check that judges
its run's items together with the job's latest before them (the aggregates' share of windows)
takes those after it only, so one bad minute fails one verdict, not every verdict for as long as
it stays among the latest.

The position covers what was judged without a gap: a run over a later range that leaves a gap
(a user's ``--since`` by hand) does not move it, and an earlier range (a backfill) never moves it back.
The table is small (a row per check and job), read and written on the driver: no Spark job.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from outoforder.errors import CheckFailed
from outoforder.stages.context import StageContext
from outoforder.stages.options import instant

log = logging.getLogger(__name__)


FAILED = ":failed"  # the row of a check's newest failed verdict: its stage's name and this


def _key(ctx: StageContext, failed: bool = False) -> dict[str, str | int]:
    if ctx.job is None:
        msg = f"{ctx.name}: a check's position needs its job"
        raise TypeError(msg)
    stage = ctx.name + FAILED if failed else ctx.name
    return {"stage": stage, "source": ctx.bronze_source, "job": ctx.job.job_id()}


def judged_until(ctx: StageContext, failed: bool = False) -> int | None:
    """The arrival instant before which the check's runs have judged everything (None: no run yet).

    ``failed``: up to which its newest failed verdict judged (None: none failed).
    """
    from outoforder.io import deltars
    from outoforder.io.tables import CHECK_POSITIONS

    filters = [(c, "=", v) for c, v in _key(ctx, failed).items()]
    got = deltars.read_table(
        CHECK_POSITIONS, ctx.settings.lake_root, ctx.settings.storage, filters, columns=["judged_until_us"]
    )
    values = [] if got is None else got.column("judged_until_us").to_pylist()
    return max(values) if values else None


def failed_until(ctx: StageContext) -> int | None:
    """The arrival instant up to which the check's newest failed verdict judged (None: none failed)."""
    return judged_until(ctx, failed=True)


def _mark(ctx: StageContext, until_us: int, run_name: str | None, failed: bool = False) -> None:
    from outoforder.io import deltars
    from outoforder.io.tables import CHECK_POSITIONS

    key = _key(ctx, failed)
    row = (key["stage"], key["source"], key["job"], until_us, run_name, int(time.time() * 1e6))
    deltars.replace_rows(CHECK_POSITIONS, ctx.settings.lake_root, ctx.settings.storage, [row], key)


@contextmanager
def judging(ctx: StageContext, args: argparse.Namespace) -> Iterator[tuple[int | None, int | None]]:
    """``(since_us, until_us)`` a check judges; its position moved once its verdict is reached.

    ``--since`` moves back to the position with ``--from-judged``. On a pass, or on
    :class:`~outoforder.errors.CheckFailed` (re-raised), the position becomes ``--until`` when the
    judged range leaves no gap after it; any other error leaves it.
    """
    since, until = instant(args.since), instant(args.until)
    known = judged_until(ctx) if until is not None or args.from_judged else None
    if args.from_judged and known is not None and (since is None or known < since):
        log.info("[%s] judging from where its runs stopped (%d µs), before --since", ctx.name, known)
        since = known
    moves_to = None  # --until, when the judged range continues the position without a gap
    if until is not None and (known is None or ((since is None or since <= known) and known < until)):
        moves_to = until
    try:
        yield since, until
    except CheckFailed:
        if moves_to is not None:
            _mark(ctx, moves_to, args.run_name)
        if until is not None:
            earlier = failed_until(ctx)
            if earlier is None or earlier < until:  # never back (a backfill's failure)
                _mark(ctx, until, args.run_name, failed=True)
        raise
    if moves_to is not None:
        _mark(ctx, moves_to, args.run_name)
