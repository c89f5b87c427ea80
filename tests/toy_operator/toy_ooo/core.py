"""The toy's core operator: the streaming contract's protocol, nothing from Spark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from outoforder.checks import Case
from outoforder.core.protocol import Arrival, Late, Output
from outoforder.errors import StateError


class WindowCount:
    """Arrivals per tumbling window, emitted as (window, count) once the event time passes end + slack.

    An arrival for a window already emitted is returned as late (never counted into it).
    """

    def __init__(self, window_us: int, slack_us: int, *, drop_late: bool = False) -> None:
        self.window_us, self.slack_us = window_us, slack_us
        self.drop_late = drop_late  # a broken variant, for the check to catch
        self.counts: dict[int, int] = {}
        self.emitted_up_to = -1  # windows below this id are emitted
        self.progress = -1

    def process(self, batch: Sequence[Arrival]) -> Output[tuple[int, int]]:
        """Count each arrival, then emit the windows the progress has passed."""
        late: list[Late] = []
        emitted: list[tuple[int, int]] = []
        for a in batch:
            w = a.ts // self.window_us
            if w < self.emitted_up_to:
                if not self.drop_late:
                    late.append(Late(a.id, a.ts, w))
            else:
                self.counts[w] = self.counts.get(w, 0) + 1
            self.progress = max(self.progress, a.ts)
            emitted += self._due((self.progress - self.slack_us) // self.window_us)
        return Output(emitted, late)

    def _due(self, below: int) -> list[tuple[int, int]]:
        out = [(w, self.counts.pop(w)) for w in sorted(self.counts) if w < below]
        self.emitted_up_to = max(self.emitted_up_to, below)
        return out

    def flush(self) -> Output[tuple[int, int]]:
        """Emit every open window."""
        return Output([(w, self.counts.pop(w)) for w in sorted(self.counts)], [])

    def snapshot(self) -> dict[str, Any]:
        """The state as plain data."""
        return {
            "counts": sorted(self.counts.items()),
            "emitted_up_to": self.emitted_up_to,
            "progress": self.progress,
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a snapshot of a toy with the same settings."""
        try:
            counts = {int(w): int(c) for w, c in snapshot["counts"]}
            emitted_up_to, progress = int(snapshot["emitted_up_to"]), int(snapshot["progress"])
        except (KeyError, TypeError, ValueError) as e:
            msg = f"not a toy snapshot ({type(e).__name__}: {e})"
            raise StateError(msg) from e
        self.counts, self.emitted_up_to, self.progress = counts, emitted_up_to, progress


WINDOW_US, SLACK_US = 200_000, 30_000


def late_rule(arrivals: list[Arrival], out: Output[Any]) -> list[Late]:
    """Independently of the operator: late iff its window ended a slack before an earlier arrival."""
    late, top = [], -1
    for a in arrivals:
        w = a.ts // WINDOW_US
        if w < (top - SLACK_US) // WINDOW_US:
            late.append(Late(a.id, a.ts, w))
        top = max(top, a.ts)
    return late


def cases(drop_late: bool = False) -> list[Case]:
    """The toy as the contract check builds it (``drop_late``: a broken one that loses its late items)."""
    return [Case("toy-count", lambda: WindowCount(WINDOW_US, SLACK_US, drop_late=drop_late), late_rule)]
