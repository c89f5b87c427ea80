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
pipeline stages and the ``python -m outoforder.stages`` CLI), ``bench`` (benchmarks). The names
below are imported on first use, so ``import outoforder`` stays cheap (Airflow parses DAG files
that import the job declarations under ``outoforder.stages``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Arrival": "outoforder.core.protocol",
    "Late": "outoforder.core.protocol",
    "Output": "outoforder.core.protocol",
    "StreamOperator": "outoforder.core.protocol",
    "JoinQuery": "outoforder.core.joins.query",
    "QJoin": "outoforder.core.joins.qjoin",
    "KSlackJoin": "outoforder.core.joins.kslack",
    "Windows": "outoforder.core.windows.assign",
    "WindowQuery": "outoforder.core.windows.buffered",
    "HPM": "outoforder.core.windows.hpm",
    "WindowResult": "outoforder.core.windows.hpm",
    "PDController": "outoforder.core.control.pd",
    "HPMSlack": "outoforder.core.windows.slack",
    "FixedSlack": "outoforder.core.windows.slack",
    "MaxDelaySlack": "outoforder.core.windows.slack",
    "AQSlack": "outoforder.core.windows.slack",
    "LatenessSlack": "outoforder.core.windows.slack",
    "TopK": "outoforder.core.topk.operator",
    "TopKQuery": "outoforder.core.topk.operator",
    "Emission": "outoforder.core.topk.operator",
    "CacheSettings": "outoforder.core.topk.cache",
    "LatenessSettings": "outoforder.core.topk.cache",
    "Theta": "outoforder.core.theta.plan",
    "fast_theta_join": "outoforder.core.theta.fast",
    "CuckooFilter": "outoforder.core.mcf.cuckoo",
    "WindowFilter": "outoforder.core.mcf.windowed",
    "MultiCuckoo": "outoforder.core.mcf.windowed",
    "present_in_range": "outoforder.core.mcf.windowed",
}
__all__ = [
    "HPM",
    "AQSlack",
    "Arrival",
    "CacheSettings",
    "CuckooFilter",
    "Emission",
    "FixedSlack",
    "HPMSlack",
    "JoinQuery",
    "KSlackJoin",
    "Late",
    "LatenessSettings",
    "LatenessSlack",
    "MaxDelaySlack",
    "MultiCuckoo",
    "Output",
    "PDController",
    "QJoin",
    "StreamOperator",
    "Theta",
    "TopK",
    "TopKQuery",
    "WindowFilter",
    "WindowQuery",
    "WindowResult",
    "Windows",
    "fast_theta_join",
    "present_in_range",
]

if TYPE_CHECKING:
    from outoforder.core.control.pd import PDController
    from outoforder.core.joins.kslack import KSlackJoin
    from outoforder.core.joins.qjoin import QJoin
    from outoforder.core.joins.query import JoinQuery
    from outoforder.core.mcf.cuckoo import CuckooFilter
    from outoforder.core.mcf.windowed import MultiCuckoo, WindowFilter, present_in_range
    from outoforder.core.protocol import Arrival, Late, Output, StreamOperator
    from outoforder.core.theta.fast import fast_theta_join
    from outoforder.core.theta.plan import Theta
    from outoforder.core.topk.cache import CacheSettings, LatenessSettings
    from outoforder.core.topk.operator import Emission, TopK, TopKQuery
    from outoforder.core.windows.assign import Windows
    from outoforder.core.windows.buffered import WindowQuery
    from outoforder.core.windows.hpm import HPM, WindowResult
    from outoforder.core.windows.slack import AQSlack, FixedSlack, HPMSlack, LatenessSlack, MaxDelaySlack


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
