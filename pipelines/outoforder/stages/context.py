"""What a stage runs with, as one object: its name, settings (the lake among them), source, job and session.

The session opens on first use (a stage that needs none, ``landing`` or ``--help``, never starts
Spark), with the stage's own ``[spark.stage_conf]`` when the session is its own, and is released
when the run ends (:func:`release`): on a shared Spark Connect server, ending the session drops
its views, caches and checkpoints.

>>> from outoforder.config import load_settings
>>> ctx = StageContext("stats", load_settings())
>>> ctx.name, ctx.source, ctx.job
('stats', None, None)
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from outoforder.config import Settings
from outoforder.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from outoforder.stages.spec import Job

log = logging.getLogger("outoforder.stages")
JobT = TypeVar("JobT", bound="Job")

_owned: list[Any] = []  # Spark Connect sessions this process opened: released when its run ends


@dataclass
class StageContext:
    """One stage run: ``name`` (the CLI's), ``settings``, ``source`` and ``job`` (None for stages without)."""

    name: str
    settings: Settings
    source: str | None = None
    job: Job | None = None
    session: SparkSession | None = field(default=None, repr=False)  # given, or opened on first use

    @classmethod
    def of(
        cls, spark: SparkSession, settings: Settings, source: str, job: Job, name: str = ""
    ) -> StageContext:
        """A context around a session already open (a library caller's, a test's, another stage's)."""
        return cls(name or type(job).__name__, settings, source, job, spark)

    def job_of(self, kind: type[JobT]) -> JobT:
        """The job, which must be a ``kind``."""
        if not isinstance(self.job, kind):
            msg = f"{self.name} needs a {kind.__name__}, got {type(self.job).__name__}"
            raise ConfigError(msg)
        return self.job

    @property
    def spark(self) -> SparkSession:
        """The session (opened on first use)."""
        if self.session is None:
            self.session = open_session(self.settings, self.name)
        return self.session

    @property
    def bronze_source(self) -> str:
        """The source, which this stage needs."""
        if not self.source:
            msg = f"{self.name} needs --source"
            raise ConfigError(msg)
        return self.source


def open_session(settings: Settings, name: str) -> SparkSession:
    """A session for stage ``name``: the active one, or a new one with the stage's ``[spark.stage_conf]``."""
    from pyspark.sql import SparkSession

    from outoforder.spark.session import get_spark, is_remote, master

    t0 = time.monotonic()
    before = SparkSession.getActiveSession()
    spark = get_spark(settings, app_name=f"outoforder-{name}")
    remote = is_remote(spark)
    if remote and before is None:
        _owned.append(spark)
        spark.addTag(f"outoforder-{name}")  # names this stage's jobs on the shared server
        signal.signal(signal.SIGTERM, _interrupted)
    if before is None:  # a session of its own: the stage's own settings (a shared one keeps its owner's)
        for key, value in settings.spark.stage_conf.get(name, {}).items():
            spark.conf.set(key, value)
    kind = f"Spark Connect {settings.spark.remote}" if remote else "in-process"
    # the master the application really runs on (the server's, or under spark-submit the connection's)
    log.info("[spark] session up (%s, %s) in %.1f s", kind, master(spark), time.monotonic() - t0)
    return spark


def _interrupted(signum: int, frame: Any) -> None:
    """SIGTERM (Airflow stopping the task): cancel this run's jobs on the shared server, then exit."""
    for spark in _owned:
        spark.interruptAll()
    raise SystemExit(128 + signum)


def release() -> None:
    """End the Spark Connect sessions this run opened: the server drops their views, caches, checkpoints."""
    while _owned:
        _owned.pop().stop()
