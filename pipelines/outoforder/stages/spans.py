"""An arrival-time span cut into the intervals a stream stage runs (:meth:`IntervalStage.run`).

A scheduled run's span starts where the job stopped and ends where the ingest has delivered
(:func:`scheduled_span`); the span is then cut into steps (:func:`interval_steps`). Over a long
span a run steps only where bronze has arrivals: each stretch without any is one interval
(:func:`quiet_collapsed`), so a year with nothing in it costs one interval, not half a million.
The intervals stay on the grid of the step, so a later run continues them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from outoforder.errors import ConfigError

# a run over more steps than this cuts only the stretches with arrivals into steps: each stretch where
# nothing arrived (a replay's 1970 clock to now, a sender offline for a year) is one step, not millions
CATCH_UP_STEPS = 120


def split_span(start: int, end: int, step: int) -> list[tuple[int, int]]:
    """[start, end) cut into intervals of ``step`` µs (the last one may be shorter).

    >>> split_span(0, 10, 4)
    [(0, 4), (4, 8), (8, 10)]
    """
    if step <= 0 or end <= start:
        msg = f"need start < end and a positive interval (got [{start}, {end}), step {step} µs)"
        raise ConfigError(msg)
    return [(lo, min(lo + step, end)) for lo in range(start, end, step)]


def quiet_collapsed(start: int, end: int, step: int, busy: Iterable[int]) -> list[tuple[int, int]]:
    """[start, end) in steps of ``step``, except that each stretch of steps without arrivals is one step.

    ``busy``: the indices of the steps (from ``start``) that hold an arrival. The steps stay on the
    grid, so a later run continues them.

    >>> quiet_collapsed(0, 18, 4, {0, 4})
    [(0, 4), (4, 16), (16, 18)]
    >>> quiet_collapsed(0, 10, 4, [])
    [(0, 10)]
    """
    out: list[tuple[int, int]] = []
    pos = start
    for i in sorted(set(busy)):
        lo = start + i * step
        if lo < pos or lo >= end:
            continue
        if lo > pos:
            out.append((pos, lo))
        pos = min(lo + step, end)
        out.append((lo, pos))
    if pos < end:
        out.append((pos, end))
    return out


def scheduled_span(
    start: int,
    end: int,
    every: int | None,
    done: int | None,
    covered: Callable[[int, int], int] | None,
) -> tuple[int, int, list[str]]:
    """The span a scheduled run processes of its data interval ``[start, end)``, and why it moved.

    ``done``: where the job stopped (None before its first interval); ``covered(start, end)``: up to
    where the ingest has delivered (None: not looked at here, a topic's coverage is waited for per
    interval). A job stopped before ``end`` catches up from where it stopped; the span ends where the
    ingest has delivered; with ``every``, in whole steps from where the job stopped (or when the
    ingest cut the span), the rest waiting for the next run. An empty span means nothing to do.

    >>> scheduled_span(100, 200, 30, 40, lambda lo, hi: 180)[:2]  # from 40, up to 180, whole steps
    (40, 160)
    >>> scheduled_span(100, 200, 30, 250, None)  # a rerun of a processed interval: as given
    (100, 200, [])
    >>> scheduled_span(100, 200, None, None, lambda lo, hi: 100)[2]
    ['bronze has arrivals up to 99: the run stops there, the rest waits for the ingest', \
'nothing ingested to process yet']
    """
    notes = []
    if done is not None and done < end and done != start:
        notes.append(
            f"the job stopped at {done}, the run's interval starts at {start}: catching up from {done}"
        )
        start = done
    clamped = False
    if covered is not None:
        reach = covered(start, end)
        if reach < end:
            notes.append(
                f"bronze has arrivals up to {reach - 1}: the run stops there, the rest waits for the ingest"
            )
            end, clamped = reach, True
    if end <= start:
        return start, start, [*notes, "nothing ingested to process yet"]
    if every and (start == done or clamped):
        # whole steps from where the job stopped: a run whose times drifted off the job's grid, or
        # that the ingest has not covered, leaves the rest to the next run instead of adding an
        # interval of a few ms
        whole = start + (end - start) // every * every
        if whole <= start:
            return start, start, [*notes, "no whole interval to process yet"]
        end = whole
    return start, end, notes


def interval_steps(
    start: int, end: int, step: int, done: int | None, busy: Callable[[int, int, int], Iterable[int]]
) -> list[tuple[int, int]]:
    """The intervals of ``[start, end)`` a run processes, in steps of ``step``.

    Over more than :data:`CATCH_UP_STEPS` steps, only where arrivals are (``busy(start, end, step)``:
    the indices of the steps holding one; :func:`quiet_collapsed`). No interval crosses ``done``, the
    job's newest processed end: a rerun of what is processed writes nothing, what follows is new.

    >>> interval_steps(0, 10, 4, 6, lambda lo, hi, step: [])
    [(0, 4), (4, 6), (6, 8), (8, 10)]
    """
    if -(-(end - start) // step) > CATCH_UP_STEPS:
        steps = quiet_collapsed(start, end, step, busy(start, end, step))
    else:
        steps = split_span(start, end, step)
    if done is None:
        return steps
    return [part for lo, hi in steps for part in ([(lo, done), (done, hi)] if lo < done < hi else [(lo, hi)])]
