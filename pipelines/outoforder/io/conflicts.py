"""Retrying a whole idempotent write when a concurrent Delta commit conflicts with it.

Delta commits optimistically: a writer reads a snapshot, writes its files, and at commit checks
whether a commit since its snapshot touched what it read (two MERGEs into the same partition, a
repair and a stream interval both inserting results of one source). If so, Delta refuses the
commit with a ``Concurrent…Exception`` and nothing of the loser is visible. The loser must then
redo its work against the new snapshot. That is safe here because every stage operation is
idempotent by construction (results are MERGEd on their keys, state is written last, appends
carry transaction ids), so the retry unit is the whole operation -- :func:`retry_on_conflict`
wraps ``run_interval``, ``repair`` and friends -- never a single write with a stale input.

Every conflict is logged and counted (:func:`conflicts_seen`), so a test can show that an overlap
really happened and was retried rather than silently avoided.

This module imports nothing from Spark at import time: stage modules use the decorator at
definition, and are imported where pyspark is absent.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from outoforder.errors import StateError, WriteConflict

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

ATTEMPTS = 6  # the first try and five retries
BASE_DELAY_S = 0.5

_seen: Counter[str] = Counter()


def conflicts_seen() -> dict[str, int]:
    """How many conflicts each wrapped operation met in this process (by operation name)."""
    return dict(_seen)


# Delta's error conditions of a commit that lost to a concurrent one (a classic session raises
# them as delta.exceptions classes, a Spark Connect client as Spark's errors carrying the condition)
CONFLICT_CONDITIONS = (
    "DELTA_CONCURRENT_APPEND",
    "DELTA_CONCURRENT_DELETE_DELETE",
    "DELTA_CONCURRENT_DELETE_READ",
    "DELTA_CONCURRENT_TRANSACTION",
    "DELTA_CONCURRENT_WRITE",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
)


def _retryable(e: BaseException) -> bool:
    """Whether ``e`` is a Delta commit that lost to a concurrent one (its condition, or its message's).

    >>> _retryable(ValueError("[DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT] Transaction conflict"))
    True
    >>> _retryable(ValueError("DELTA_CONCURRENT_APPEND")), _retryable(WriteConflict("lost"))
    (False, True)
    """
    if isinstance(e, WriteConflict):
        return True
    found = getattr(e, "getCondition", lambda: None)() or ""
    if not found:  # a classic session's Delta exceptions carry the condition in their message only
        leading = re.match(r"\[([A-Z_.]+)\]", str(e).lstrip())
        found = leading.group(1) if leading else ""
    return any(found == c or found.startswith(c + ".") for c in CONFLICT_CONDITIONS)


def _attempts() -> int:
    return max(1, int(os.environ.get("OOO_CONFLICT_ATTEMPTS", ATTEMPTS)))


def retry_on_conflict(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` again (jittered exponential backoff) when a concurrent Delta commit wins.

    ``fn`` must be idempotent as a whole: a retry redoes everything, reads included. After
    ``OOO_CONFLICT_ATTEMPTS`` (default 6) tries the last conflict is raised as a
    :class:`~outoforder.errors.StateError` naming the operation, so the Airflow task fails
    loudly and is retried by its own policy.

    >>> calls = []
    >>> @retry_on_conflict
    ... def op():
    ...     calls.append(1)
    ...     return "done"
    >>> op(), len(calls)
    ('done', 1)
    """
    name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return retrying(name, functools.partial(fn, *args, **kwargs))

    return wrapper


def retrying(name: str, fn: Callable[[], R]) -> R:
    """Call ``fn`` as :func:`retry_on_conflict` would, counting its conflicts under ``name``."""
    attempts = _attempts()
    attempt = 1
    while True:
        try:
            return fn()
        except Exception as e:
            if not _retryable(e):
                raise
            _seen[name] += 1
            kind = type(e).__name__
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            if attempt == attempts:
                msg = f"{name}: still conflicting after {attempts} tries ({kind}: {first})"
                raise StateError(msg) from e
            delay = BASE_DELAY_S * 2 ** (attempt - 1) * (0.5 + random.random())
            log.warning("[conflict] %s: %s (%s); retry %d/%d in %.1f s", name, kind, first, attempt,
                        attempts - 1, delay)  # fmt: skip
            time.sleep(delay)
            attempt += 1
