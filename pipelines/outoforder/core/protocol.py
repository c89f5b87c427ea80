"""The one shape of every streaming operator: feed a batch of arrivals, get what it emitted and what was late.

An operator is built from its settings; then, in arrival order:

- :meth:`StreamOperator.process` takes a batch of :class:`Arrival` (any size, one tuple upwards)
  and returns an :class:`Output`: the results emitted during the batch, in emission order, and
  the arrivals that came too late for something (a window already emitted, a partner already
  expired), each as a :class:`Late` item. Late items are never dropped silently;
- :meth:`StreamOperator.flush` ends the stream (emits what is still open);
- :meth:`StreamOperator.snapshot` returns the state as plain JSON-able data, and
  :meth:`StreamOperator.restore` loads such a snapshot into an operator built from the same
  settings, so state can be persisted between micro-batches and a retry resumes exactly.

The contract every operator keeps (checked over all of them by ``tests/core/test_contract.py``):
a snapshot taken mid-stream and restored gives the same output as an uninterrupted run; any
split of the arrivals into batches gives the same output (only an explicit adaptation cadence
may depend on batches, and then it says so); every late item is returned.

>>> from outoforder.core.joins.qjoin import QJoin
>>> from outoforder.core.joins.query import JoinQuery
>>> op = QJoin(JoinQuery(window_us=10, theta=1.0))
>>> op.process([Arrival(0, 100, side=0), Arrival(1, 105, side=1)]).emitted
[(0, 1)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, Protocol, TypeVar

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One tuple as it arrives: its id (the arrival sequence number results refer to) and event time.

    The other fields are what the operators read: ``value`` (aggregated or ranked), ``side``
    (joins: 0 = R, 1 = S), ``x``, ``y`` (distance joins) and ``key`` (key joins).
    """

    id: int
    ts: int  # event time, µs
    value: float = math.nan
    side: int = 0
    x: float = 0.0
    y: float = 0.0
    key: int = 0


@dataclass(frozen=True, slots=True)
class Late:
    """An arrival that came too late for something.

    For a window (its id) already emitted; or, in a join, behind the horizon of its own stream
    (``window`` None), so that it was not kept for later partners.
    """

    id: int
    ts: int
    window: int | None = None


@dataclass(frozen=True)
class Output(Generic[R]):
    """What one call produced: results in emission order, and the late arrivals."""

    emitted: list[R] = field(default_factory=list)
    late: list[Late] = field(default_factory=list)

    def __add__(self, other: Output[R]) -> Output[R]:
        """Both outputs, one after the other (an operator's extra fields are kept, as lists)."""
        kind = type(other) if isinstance(other, type(self)) else type(self)
        return kind(
            **{f.name: [*getattr(self, f.name, []), *getattr(other, f.name, [])] for f in fields(kind)}
        )


class StreamOperator(Protocol[R]):
    """What every streaming operator offers (see the module docstring); ``R`` is what it emits.

    An operator's own output may carry more (:class:`~outoforder.core.windows.hpm.HPMOutput` adds
    the buffer's K per arrival): its methods return that subclass.
    """

    def process(self, batch: Sequence[Arrival]) -> Output[R]:
        """Handle a batch of arrivals, in arrival order."""
        ...

    def flush(self) -> Output[R]:
        """The end of the stream: emit whatever is still open."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The state as plain (JSON-able) data."""
        ...

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Load a :meth:`snapshot` taken from an operator built with the same settings."""
        ...
