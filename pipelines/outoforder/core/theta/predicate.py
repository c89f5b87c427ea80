"""The θ predicates of a join, as text: ``<``, ``<=``, ``>=``, ``>``, ``=`` or ``band:c`` (``|a − b| <= c``).

Standard library only, so that job declarations can validate predicates where numpy is not loaded
(Airflow parsing a DAG file).

>>> parse_predicate("band:2.5"), parse_predicate("<=")
(('band', 2.5), ('<=', 0.0))
"""

from __future__ import annotations

import math

from outoforder.errors import ConfigError

OPS = ("<", "<=", ">=", ">", "=")


def parse_predicate(text: str) -> tuple[str, float]:
    """(operator, band width) of a predicate; :class:`ConfigError` naming what is wrong otherwise."""
    if text in OPS:
        return text, 0.0
    if text.startswith("band:"):
        try:
            c = float(text.split(":", 1)[1])
        except ValueError as e:
            msg = f"bad band predicate {text!r}: expected band:c with c >= 0"
            raise ConfigError(msg) from e
        if not 0 <= c < math.inf:
            msg = f"band width must be a finite number >= 0, got {c}"
            raise ConfigError(msg)
        return "band", c
    msg = f"unknown θ operator {text!r}; known: {', '.join(OPS)}, band:c"
    raise ConfigError(msg)
