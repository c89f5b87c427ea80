"""The contract every streaming operator keeps, as checks you can run over an operator of your own.

As River ships ``check_estimator``: build a :class:`Case` (how to make the operator, and optionally
its own definition of late) and call :func:`check_operator`, or the single checks with inputs of
your choosing (the project's tests drive them with Hypothesis over many seeds and batchings):

- :func:`check_snapshot_round_trip`: a snapshot taken mid-stream, passed through JSON and
  restored into a fresh operator, continues exactly as the uninterrupted run;
- :func:`check_batch_invariance`: any split of the arrivals into batches, down to one tuple,
  gives the same output (an operator whose adaptation cadence is per batch says so);
- :func:`check_late_items`: no late item disappears or is made up (each is an arrival of the
  input; with the case's own rule, exactly the late ones), and nothing is emitted twice;
- :func:`check_bad_snapshot_refused`: a snapshot that is not one fails with a
  :class:`~outoforder.errors.StateError`, never with a half-restored operator.

A check that fails raises :class:`ContractViolation` naming the case and what broke.

The built-in operators' cases live beside this module (:mod:`outoforder.checks.joins`,
:mod:`~outoforder.checks.windows`, :mod:`~outoforder.checks.topk`), each named by its operator's
declaration (``contract``); :func:`installed_cases` gathers them and those of any operator installed
under the ``outoforder.operators`` entry point group, and ``python -m outoforder.checks`` checks
them all.

>>> from outoforder import TopK, TopKQuery, Windows
>>> check_operator(Case("topk", lambda: TopK(TopKQuery(Windows(200_000, 50_000), k=3), cache=30_000)))
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from outoforder.core.protocol import Arrival, Late, Output, StreamOperator
from outoforder.errors import OutOfOrderError, StateError

LateRule = Callable[[list[Arrival], Output[Any]], list[Late]]


class ContractViolation(OutOfOrderError, AssertionError):
    """An operator broke the streaming contract (an :class:`AssertionError`, so test runners report it)."""


@dataclass(frozen=True)
class Case:
    """One operator under check: ``make`` builds a fresh one from the same settings each time.

    ``late`` (optional) is an independent definition of which arrivals are late, from the input
    and the output; ``nan_share`` the share of arrivals without a value (operators that rank or
    aggregate meet them); ``batch_invariant`` False when the operator adapts per batch by design.
    """

    name: str
    make: Callable[[], StreamOperator[Any]]
    late: LateRule | None = None
    nan_share: float = 0.0
    batch_invariant: bool = True


def disordered_stream(seed: int, n: int = 240, nan_share: float = 0.0) -> list[Arrival]:
    """Two interleaved streams over 2 s, half the tuples delayed exponentially (mean 60 ms), in arrival order.

    >>> s = disordered_stream(3)
    >>> len(s), sorted(a.id for a in s) == list(range(240)), any(a.ts < b.ts for a, b in zip(s[1:], s))
    (240, True, True)
    """
    rng = random.Random(seed)
    ts = sorted(rng.randrange(0, 2_000_000) for _ in range(n))
    arrive = [t + (rng.expovariate(1 / 60_000) if rng.random() < 0.5 else 0.0) for t in ts]
    order = sorted(range(n), key=lambda j: arrive[j])  # stable: equal arrivals keep event order
    out = []
    for i, j in enumerate(order):
        value = float("nan") if rng.random() < nan_share else rng.gauss(10, 3)
        out.append(Arrival(i, ts[j], value, rng.randrange(2), rng.uniform(0, 10), rng.uniform(0, 10)))
    return out


def split(arrivals: Sequence[Arrival], cuts: Sequence[int]) -> list[list[Arrival]]:
    """The arrivals cut into batches at ``cuts`` (positions modulo the length; no empty batch)."""
    points = sorted({0, len(arrivals), *(c % (len(arrivals) + 1) for c in cuts)})
    return [list(arrivals[a:b]) for a, b in pairwise(points)]


def run(op: StreamOperator[Any], batches: Sequence[Sequence[Arrival]]) -> Output[Any]:
    """Feed every batch, then flush; everything the operator produced."""
    out: Output[Any] = Output()
    for b in batches:
        out = out + op.process(b)
    return out + op.flush()


def _comparable(out: Output[Any]) -> tuple[list[Any], list[Late]]:
    return list(out.emitted), list(out.late)


def _fail(case: Case, what: str) -> ContractViolation:
    return ContractViolation(f"{case.name}: {what}")


def check_snapshot_round_trip(case: Case, batches: Sequence[Sequence[Arrival]], at: int) -> None:
    """Snapshot after ``at`` batches, through JSON, into a fresh operator: the same output as without."""
    whole = run(case.make(), batches)
    k = at % (len(batches) + 1)
    first = case.make()
    before: Output[Any] = Output()
    for b in batches[:k]:
        before = before + first.process(b)
    try:
        snap = json.loads(json.dumps(first.snapshot()))
    except TypeError as e:
        raise _fail(case, f"its snapshot is not plain JSON data ({e})") from e
    resumed = case.make()
    resumed.restore(snap)
    if _comparable(before + run(resumed, batches[k:])) != _comparable(whole):
        raise _fail(case, f"restored after batch {k} of {len(batches)}, it does not continue as without")


Batches = Sequence[Sequence[Arrival]]


def check_batch_invariance(case: Case, arrivals: Sequence[Arrival], batches: Batches) -> None:
    """The batches, one batch of everything and one tuple at a time give the same output."""
    one_by_one = _comparable(run(case.make(), [[a] for a in arrivals]))
    for name, given in (("these batches", batches), ("one batch", [list(arrivals)])):
        if _comparable(run(case.make(), given)) != one_by_one:
            raise _fail(case, f"{name} give another output than one tuple at a time")


def check_late_items(case: Case, arrivals: Sequence[Arrival], batches: Batches) -> Output[Any]:
    """Each late item is an arrival of the input (by the case's rule, exactly the late ones); none twice.

    Returns the output, for checks of an operator's own.
    """
    out = run(case.make(), batches)
    given = {(a.id, a.ts) for a in arrivals}
    made_up = [x for x in out.late if (x.id, x.ts) not in given]
    if made_up:
        raise _fail(case, f"late items that are not arrivals of the input: {made_up[:3]}")
    if case.late is not None:
        want, got = Counter(case.late(list(arrivals), out)), Counter(out.late)
        if want != got:
            missing, extra = list((want - got).elements())[:3], list((got - want).elements())[:3]
            raise _fail(case, f"late items differ from its rule: missing {missing}, not late {extra}")
    keys = [getattr(e, "window_id", e) for e in out.emitted]
    if len(keys) != len(set(keys)):
        twice = [k for k, c in Counter(keys).items() if c > 1][:3]
        raise _fail(case, f"emitted twice: {twice}")
    return out


def check_bad_snapshot_refused(case: Case, arrivals: Sequence[Arrival]) -> None:
    """Restoring what is not a snapshot raises :class:`StateError`."""
    case.make().process(list(arrivals[:50]))
    for bad in ({}, {"index": "x"}, {"operator": {"open": 3}}):
        try:
            case.make().restore(bad)
        except StateError:
            continue
        except Exception as e:  # anything else is a half-restored operator's way of failing
            raise _fail(case, f"restoring {bad!r} raised {type(e).__name__}, not StateError") from e
        raise _fail(case, f"restoring {bad!r} succeeded")


def installed_cases() -> list[Case]:
    """The cases of every operator the registry finds: the built-in ones', then those installed."""
    from outoforder.stages import registry

    return [c for op in registry.operators() if op.contract for c in registry.load(op.contract)()]


def check_operator(case: Case, seeds: Sequence[int] = range(5)) -> None:
    """Every check over disordered streams of ``seeds``, each cut into batches at random."""
    for seed in seeds:
        arrivals = disordered_stream(seed, nan_share=case.nan_share)
        rng = random.Random(seed)
        batches = split(arrivals, [rng.randrange(len(arrivals)) for _ in range(rng.randrange(1, 8))])
        check_snapshot_round_trip(case, batches, rng.randrange(len(batches) + 1))
        if case.batch_invariant:
            check_batch_invariance(case, arrivals, batches)
        check_late_items(case, arrivals, batches)
    check_bad_snapshot_refused(case, disordered_stream(1))


if TYPE_CHECKING:  # every built-in operator has the protocol's shape (mypy checks these lines)
    from outoforder.core.joins.kslack import KSlackJoin
    from outoforder.core.joins.qjoin import QJoin
    from outoforder.core.topk.naive import Ranked, RecomputeTopK
    from outoforder.core.topk.operator import Emission, TopK
    from outoforder.core.topk.sma import SkybandTopK
    from outoforder.core.windows.hpm import HPM, WindowResult

    _SHAPES: tuple[
        type[StreamOperator[tuple[int, int]]],
        type[StreamOperator[tuple[int, int]]],
        type[StreamOperator[WindowResult]],
        type[StreamOperator[Emission]],
        type[StreamOperator[Ranked]],
        type[StreamOperator[Ranked]],
    ] = (QJoin, KSlackJoin, HPM, TopK, SkybandTopK, RecomputeTopK)
