"""What Spark expects of a DataFrame before running it, read through what every kind of session offers.

The θ-join and the MCF pre-filter size their plans from Spark's own estimates (a DataFrame's bytes
by the optimizer's statistics, a row's default size, the cores, the broadcast threshold). These are
read with SQL (``EXPLAIN COST``) and settings, never through the JVM, so the same code runs on a
classic session and as a client of the shared Spark Connect server.
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING

from outoforder.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

UNKNOWN_BYTES = 2**63 - 1  # Spark's "cannot tell" (Long.MAX_VALUE)
_UNITS = {"B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40, "PiB": 50, "EiB": 60}
_STATS = re.compile(r"Statistics\(sizeInBytes=([0-9.Ee+-]+) (B|KiB|MiB|GiB|TiB|PiB|EiB)")


def size_of_stats(plan: str) -> int:
    """The root's ``sizeInBytes`` of an ``EXPLAIN COST`` text's optimized plan, in bytes.

    >>> size_of_stats("== Optimized Logical Plan ==; Project [a], Statistics(sizeInBytes=1.5 KiB)")
    1536
    >>> size_of_stats("== Optimized Logical Plan ==; Scan, Statistics(sizeInBytes=8.0 EiB)") == UNKNOWN_BYTES
    True
    """
    optimized = plan.split("== Optimized Logical Plan ==", 1)[-1]
    found = _STATS.search(optimized)
    if found is None:
        return UNKNOWN_BYTES
    value = float(found.group(1)) * 2 ** _UNITS[found.group(2)]
    return UNKNOWN_BYTES if value >= 2**62 else int(value)


def estimated_bytes(df: DataFrame) -> int:
    """Spark's estimate of a DataFrame's size (the optimizer's statistics: no job runs).

    :data:`UNKNOWN_BYTES` where Spark cannot tell (an empty local frame, a Python data source).
    """
    spark = df.sparkSession
    name = f"ooo_estimate_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    try:
        row = spark.sql(f"EXPLAIN COST SELECT * FROM {name}").first()
    finally:
        spark.catalog.dropTempView(name)
    return UNKNOWN_BYTES if row is None else size_of_stats(str(row[0]))


def default_size(dtype: DataType) -> int:
    """Spark's default size of a value of ``dtype`` in bytes (what its planner assumes without statistics).

    >>> from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType
    >>> default_size(StructType([StructField("a", LongType()), StructField("b", ArrayType(StringType()))]))
    28
    """
    from pyspark.sql import types as T

    if isinstance(dtype, T.StructType):
        return sum(default_size(f.dataType) for f in dtype.fields)
    if isinstance(dtype, T.ArrayType):
        return default_size(dtype.elementType)
    if isinstance(dtype, T.MapType):
        return default_size(dtype.keyType) + default_size(dtype.valueType)
    if isinstance(dtype, T.DecimalType):
        return 8 if dtype.precision <= 18 else 16
    sizes: dict[type, int] = {
        T.BooleanType: 1, T.ByteType: 1, T.ShortType: 2, T.IntegerType: 4, T.LongType: 8, T.FloatType: 4,
        T.DoubleType: 8, T.DateType: 4, T.TimestampType: 8, T.TimestampNTZType: 8, T.StringType: 20,
        T.BinaryType: 100, T.NullType: 1, T.CalendarIntervalType: 16, T.DayTimeIntervalType: 8,
        T.YearMonthIntervalType: 4,
    }  # fmt: skip
    return sizes.get(type(dtype), 8)


def row_size(df: DataFrame) -> int:
    """Spark's own estimate of a row's bytes: a header of 8 and each column's default size."""
    return 8 + default_size(df.schema)


def parallelism(spark: SparkSession) -> int:
    """Tasks a job spreads over: ``spark.default.parallelism`` (the project sets it), else the shuffle's."""
    for key in ("spark.default.parallelism", "spark.sql.shuffle.partitions"):
        value = spark.conf.get(key, None)
        if value:
            return max(1, int(value))
    return 1


_BYTE_UNITS = {
    "": 0,
    "b": 0,
    "k": 10,
    "kb": 10,
    "m": 20,
    "mb": 20,
    "g": 30,
    "gb": 30,
    "t": 40,
    "tb": 40,
    "p": 50,
    "pb": 50,
}


def byte_string(text: str) -> int:
    """A Spark size setting (``10485760``, ``10m``, ``1g``, ``-1``) in bytes, as Spark reads it.

    >>> byte_string("10485760"), byte_string("10m"), byte_string("1GB"), byte_string("-1")
    (10485760, 10485760, 1073741824, -1)
    """
    found = re.fullmatch(r"\s*(-?\d+)\s*([a-zA-Z]*)\s*", text)
    if found is None or found.group(2).lower() not in _BYTE_UNITS:
        msg = f"not a size in bytes: {text!r}"
        raise ConfigError(msg)
    return int(found.group(1)) << _BYTE_UNITS[found.group(2).lower()]
