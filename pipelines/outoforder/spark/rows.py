"""Small helpers for the driver's side of a Spark job: rows that a query returns by construction."""

from __future__ import annotations

from typing import TYPE_CHECKING

from outoforder.errors import StateError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row


def one_row(df: DataFrame) -> Row:
    """The row of a global aggregation (``df.agg(...)``): Spark returns exactly one, even over no input.

    A missing row is a broken invariant, not an empty input: it fails loudly instead of being read
    as zeros.
    """
    row = df.first()
    if row is None:
        msg = "a global aggregation returned no row"
        raise StateError(msg)
    return row
