"""outoforder: quality-driven processing of out-of-order streams, as a library and on Spark and Airflow.

The operators, usable without Spark (pure Python and numpy), each documented with a runnable
example in its module and listed in ``docs/operators.md``:

- streaming operators with one protocol (:mod:`outoforder.core.protocol`: feed a batch of
  :class:`Arrival`, get an :class:`Output` of emitted results and :class:`Late` items;
  ``snapshot()`` / ``restore()``): :class:`QJoin`, :class:`KSlackJoin` (K-slack and MP-K-slack),
  :class:`HPM` (with HPM's PD-controlled buffer, or the K-slack family's :class:`FixedSlack`,
  :class:`MaxDelaySlack`, :class:`AQSlack`), :class:`TopK` (the continuous top-k with the
  adaptive cache duration);
- FastThetaJoin's plan (:func:`fast_theta_join`, with :class:`Theta` predicates), the
  :class:`CuckooFilter` and MCF (:class:`WindowFilter`, :class:`MultiCuckoo`,
  :func:`present_in_range`).

>>> from outoforder import Arrival, JoinQuery, QJoin
>>> op = QJoin(JoinQuery(window_us=10, theta=1.0))
>>> op.process([Arrival(0, 100, side=0), Arrival(1, 105, side=1)]).emitted
[(0, 1)]

Layers (imports flow one way, enforced by import-linter contracts in pyproject.toml): ``core``
(the algorithms), ``sources`` (readers, disorder injection, generators), ``io`` (Delta tables),
``spark`` (set-at-a-time twins), ``quality`` (Great Expectations, reports), ``stages`` (the
pipeline stages and the ``python -m outoforder.stages`` CLI); the benchmarks are a package of their
own beside it (``benchmarks/``, ``bash infra/bench.sh <name>``). The names
below are imported on first use, so ``import outoforder`` stays cheap (Airflow parses DAG files
that import the job declarations under ``outoforder.stages``). :mod:`outoforder.checks` checks an
operator of your own against the streaming contract.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # the one list of exports: type checkers read it here, __getattr__ imports from it
    from outoforder.core.control.pd import PDController as PDController
    from outoforder.core.joins.kslack import KSlackJoin as KSlackJoin
    from outoforder.core.joins.qjoin import QJoin as QJoin
    from outoforder.core.joins.query import JoinQuery as JoinQuery
    from outoforder.core.mcf.cuckoo import CuckooFilter as CuckooFilter
    from outoforder.core.mcf.windowed import MultiCuckoo as MultiCuckoo
    from outoforder.core.mcf.windowed import WindowFilter as WindowFilter
    from outoforder.core.mcf.windowed import present_in_range as present_in_range
    from outoforder.core.protocol import Arrival as Arrival
    from outoforder.core.protocol import Late as Late
    from outoforder.core.protocol import Output as Output
    from outoforder.core.protocol import StreamOperator as StreamOperator
    from outoforder.core.theta.fast import fast_theta_join as fast_theta_join
    from outoforder.core.theta.plan import Theta as Theta
    from outoforder.core.topk.cache import CacheSettings as CacheSettings
    from outoforder.core.topk.cache import LatenessSettings as LatenessSettings
    from outoforder.core.topk.operator import Emission as Emission
    from outoforder.core.topk.operator import TopK as TopK
    from outoforder.core.topk.operator import TopKQuery as TopKQuery
    from outoforder.core.windows.assign import Windows as Windows
    from outoforder.core.windows.buffered import WindowQuery as WindowQuery
    from outoforder.core.windows.hpm import HPM as HPM
    from outoforder.core.windows.hpm import WindowResult as WindowResult
    from outoforder.core.windows.slack import AQSlack as AQSlack
    from outoforder.core.windows.slack import FixedSlack as FixedSlack
    from outoforder.core.windows.slack import HPMSlack as HPMSlack
    from outoforder.core.windows.slack import LatenessSlack as LatenessSlack
    from outoforder.core.windows.slack import MaxDelaySlack as MaxDelaySlack


def _exports() -> dict[str, str]:
    """Name -> module, read from the ``TYPE_CHECKING`` block above (so the list is written once)."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {
        a.asname or a.name: str(n.module)
        for n in block.body
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }


_EXPORTS = _exports()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'outoforder' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*globals(), *__all__]
