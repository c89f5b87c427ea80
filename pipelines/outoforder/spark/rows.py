"""Small helpers for the driver's side of a Spark job: rows that a query returns by construction."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

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


_ARROW = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema of a flat Spark DDL string (``"a long, b string"``), for ``mapInArrow`` output."""
    return pa.schema([(f.split()[0], _ARROW[f.split()[1]]) for f in ddl.split(", ")])
