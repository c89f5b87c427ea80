"""An arrival-time span cut into the intervals a stream stage runs (:meth:`IntervalStage.run`).

Over a long span a run steps only where bronze has arrivals: each stretch without any is one
interval (:func:`quiet_collapsed`), so a year with nothing in it costs one interval, not half a
million. The intervals stay on the grid of the step, so a later run continues them.
"""

from __future__ import annotations

from collections.abc import Iterable

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
