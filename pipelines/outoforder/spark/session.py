"""The one place a SparkSession is built: a client of the shared Spark Connect server, or a classic one.

Every task of the pipeline is a client of one long-lived Spark application, the Spark Connect
server of ``infra/spark-connect.sh`` (``spark.remote`` / ``OOO_SPARK_REMOTE``): a client connects
in a fraction of a second instead of starting a JVM, and sets only its own session's SQL settings
(:meth:`outoforder.config.Settings.session_conf`); the server was started with all of them, Delta's
jars and the lake's storage. Without a remote, the process builds a classic session of its own:
Delta-enabled, ``local[2]`` by default (the in-process main job, the benchmarks). Delta's jars (and
s3a's) come from the Maven cache that infra/setup.sh fills and go on the class path, never through
``spark.jars.packages`` (which resolves through Ivy on every start and dies offline).

A session that is already running in the process is returned as it is: its settings are the ones
its creator chose (a test's session keeps the tests' settings when a stage runs in-process).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from outoforder.config import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


def get_spark(settings: Settings | None = None, app_name: str = "outoforder") -> SparkSession:
    """The running session, else a client of ``spark.remote``, else a new classic session."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        return SparkSession.active()  # the thread's active session, else the process's default one
    except PySparkRuntimeError as e:
        if e.getCondition() != "NO_ACTIVE_OR_DEFAULT_SESSION":
            raise
    settings = settings or load_settings()
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # under spark-submit: its application, always
    if settings.spark.remote and not submitted:
        return connect(settings)
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        # Not under spark-submit: we choose the master. Under spark-submit (a deployment that
        # submits one application per task), its --master wins, so both run one code path.
        builder = builder.master(settings.spark.master)
    for key, value in settings.spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if settings.lake_is_remote:
        # The object store's keys as the session's own Hadoop settings, once the JVM runs: a
        # builder setting is passed to the JVM's launcher on its command line, readable by every
        # local user. Every read and write of the session (and its executors' tasks) sees them.
        for key, value in settings.storage.credentials().items():
            spark.conf.set(key, value)
    return spark


def connect(settings: Settings) -> SparkSession:
    """A new session on the Spark Connect server at ``spark.remote``, with this job's SQL settings."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.remote(settings.spark.remote).create()
    for key, value in settings.session_conf().items():
        spark.conf.set(key, value)
    return spark


def is_remote(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client's session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def master(spark: SparkSession) -> str:
    """The master the session's application runs on (``local[2]``, ``spark://…``)."""
    return str(spark.conf.get("spark.master", "?"))


def side_by_side(spark: SparkSession, work: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``work`` over ``items`` in ``workers`` threads (their Spark jobs submitted together), in order.

    Each thread carries the caller's tags (Spark Connect) or job group (a classic session, through
    PySpark's :func:`~pyspark.util.inheritable_thread_target`, tags too): Spark keeps both per thread, and a
    job submitted from a bare thread would be named by neither, so a stage's jobs would not all be
    found under its name (the UI, a count of a run's jobs).
    """
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql.utils import is_remote as connect_process

    carried: Callable[[T], R] = work
    if is_remote(spark):
        tags = spark.getTags()

        def carried(item: T) -> R:
            for tag in tags:
                spark.addTag(tag)
            try:
                return work(item)
            finally:
                spark.clearTags()

    elif not connect_process():  # PySpark's helper takes a process with a Connect session for Connect
        from pyspark.util import inheritable_thread_target

        carried = inheritable_thread_target(spark)(work)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(carried, items))
