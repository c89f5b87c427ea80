"""The sections of the settings (``[spark]``, ``[storage]``, ``[ingest]``, ...): one frozen class each.

Standard library only, like :mod:`outoforder.config`, which builds them from the settings files.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from outoforder.errors import ConfigError

# Delta's log store for an s3a lake (infra/jvm/logstore/S3ConditionalLogStore.java)
S3_LOG_STORE = "io.outoforder.delta.S3ConditionalLogStore"


@dataclass(frozen=True)
class SparkSettings:
    """How the SparkSession is built (see :mod:`outoforder.spark.session`)."""

    master: str = "local[2]"
    # sc://host:port of the shared Spark Connect server (infra/spark-connect.sh): stages are its
    # clients; empty: a classic session in the process (the --direct main job, benchmarks)
    remote: str = ""
    shuffle_partitions: int = 4
    driver_memory: str = "3g"
    jars_dir: str = ""
    log_level: str = "WARN"
    conf: Mapping[str, str] = field(default_factory=dict)
    # a stage's own SQL settings over ``conf`` (``[spark.stage_conf.<stage>]``), set on a session
    # the stage opens itself: a client's session on the shared server, or its own process's
    stage_conf: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.shuffle_partitions <= 10_000:
            msg = f"spark.shuffle_partitions must be in 1..10000, got {self.shuffle_partitions}"
            raise ConfigError(msg)
        for stage, conf in self.stage_conf.items():
            fixed = sorted(k for k in conf if not session_settable(k))
            if fixed:
                msg = (
                    f"spark.stage_conf.{stage}: {', '.join(fixed)} cannot be set per session (only "
                    "spark.sql.* and spark.databricks.delta.* settings that are not static): use [spark.conf]"
                )
                raise ConfigError(msg)
        if self.remote and not self.remote.startswith("sc://"):
            msg = f"spark.remote must be a Spark Connect address sc://host:port, got {self.remote!r}"
            raise ConfigError(msg)

    def jar_paths(self) -> list[str]:
        """Delta's jars from the Maven cache; fails clearly when setup has not fetched them."""
        return _jars(self.jars_dir, "Delta", "OOO_SPARK_JARS_DIR")

    def to_conf(self) -> dict[str, str]:
        """The Spark settings the project relies on, as strings, without the jars.

        :meth:`Settings.spark_conf` adds the jars, the storage settings and ``conf``.
        """
        conf = {
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.default.parallelism": str(self.shuffle_partitions),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": self.driver_memory,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.log.level": self.log_level,
            # Delta reads its log with 50 partitions by default: far too many on 2 cores.
            "spark.databricks.delta.snapshotPartitions": "2",
            # A file-size histogram of the whole table at every commit (on by default since 4.x,
            # delta-io/delta#6854): work on every write that nothing here reads.
            "spark.databricks.delta.fileSizeHistogramMetrics.enabled": "false",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            # Batches to Python are bounded by maxRecordsPerBatch (10,000 rows). The byte bound on
            # top costs a size computation per row, which for list columns (the aggregates' lateness
            # profiles) walks the whole batch: quadratic, most of the aggregate stage's time.
            # Int.MaxValue switches that check off (Spark's BatchedPythonArrowInput).
            "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
            # Constraint propagation fails on unions of checkpointed, filtered micro-batch state
            # ("key not found" in UnionBase.rewriteConstraints, Spark 4.2); it only prunes filters.
            "spark.sql.constraintPropagation.enabled": "false",
            # The stream stages checkpoint every micro-batch's state (localCheckpoint); its blocks
            # are freed only after a driver GC finds the RDD unreachable. The default period
            # (30 min) lets a long-lived session fill the driver heap with dead blocks.
            "spark.cleaner.periodicGC.interval": "2min",
            # A Kafka read's consumers go back to a pool that keeps them idle for 5 minutes, each
            # with the records it fetched past the read's end. A batch read has a group id of its
            # own, so none is ever borrowed again: on a live stream the pool held five minutes of
            # the topic in the driver's heap (and ten times that at the full rate).
            "spark.kafka.consumer.cache.timeout": "5s",
            "spark.kafka.consumer.cache.evictorThreadRunInterval": "2s",
            "spark.kafka.consumer.fetchedData.cache.timeout": "5s",
            "spark.kafka.consumer.fetchedData.cache.evictorThreadRunInterval": "2s",
        }
        return conf


def _jars(folder_name: str, what: str, env_var: str) -> list[str]:
    if not folder_name:
        msg = f"no {what} jar folder configured: run infra/setup.sh, or set {env_var}"
        raise ConfigError(msg)
    folder = Path(folder_name)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not jars:
        msg = f"no jars in {folder}: run infra/setup.sh to fetch the {what} jars with Maven"
        raise ConfigError(msg)
    return jars


def is_remote(root: str | os.PathLike[str]) -> bool:
    """Whether a lake root is an object-store URI (``s3a://bucket/prefix``) rather than a folder.

    >>> is_remote("s3a://lake/prefix"), is_remote("/tmp/lake")
    (True, False)
    """
    return "://" in str(root)


@dataclass(frozen=True)
class StorageSettings:
    """The S3-compatible object store under an ``s3a://`` lake (MinIO on loopback by default).

    Only used when the lake root is an ``s3a://`` URI; a local lake needs none of it.
    """

    endpoint: str = "http://127.0.0.1:9000"
    access_key: str = ""
    secret_key: str = field(default="", repr=False)  # never in a log line or a traceback's locals
    region: str = "us-east-1"
    path_style: bool = True  # MinIO and most S3-compatible servers want path-style addressing
    jars_dir: str = ""  # hadoop-aws and the AWS SDK bundle, fetched by infra/setup.sh
    landing_uri: str = "s3a://landing"  # raw files dropped under <landing_uri>/incoming/
    publish_uri: str = ""  # where the report stage uploads the reports and Data Docs ("" = nowhere)

    def jar_paths(self) -> list[str]:
        """hadoop-aws and the AWS SDK bundle from the Maven cache."""
        return _jars(self.jars_dir, "s3a (hadoop-aws, AWS SDK)", "OOO_S3A_JARS_DIR")

    def require_credentials(self) -> None:
        """Fail clearly when the keys are missing (Spark's s3a and the SDK client both need them)."""
        if not (self.access_key and self.secret_key):
            msg = (
                "the object store needs storage.access_key and storage.secret_key "
                "(OOO_S3_ACCESS_KEY, OOO_S3_SECRET_KEY)"
            )
            raise ConfigError(msg)

    def to_conf(self) -> dict[str, str]:
        """The s3a filesystem's Spark settings (``spark.hadoop.fs.s3a.*``), without the keys.

        The keys are :meth:`credentials`: a Spark setting given at launch is on the JVM's command
        line, which every local user can read (``ps``).
        """
        self.require_credentials()
        s3a = "spark.hadoop.fs.s3a."
        return {
            f"{s3a}endpoint": self.endpoint,
            f"{s3a}endpoint.region": self.region,
            f"{s3a}path.style.access": str(self.path_style).lower(),
            f"{s3a}connection.ssl.enabled": str(self.endpoint.startswith("https://")).lower(),
            f"{s3a}aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            # Hadoop 3.5 reads through the analytics accelerator by default, which needs the extra
            # analyticsaccelerator-s3 jar; the classic stream needs nothing more and is the one
            # tested against S3-compatible servers.
            f"{s3a}input.stream.type": "classic",
            # Delta's log on S3 for writers in several processes: commit files are created with
            # conditional PUTs (infra/jvm/logstore; S3SingleDriverLogStore keeps apart only the
            # writers of one JVM)
            f"{s3a}create.conditional.enabled": "true",
            "spark.delta.logStore.s3a.impl": S3_LOG_STORE,
        }

    def credentials(self) -> dict[str, str]:
        """The s3a keys as Hadoop settings: what a session sets once it runs (never at launch)."""
        self.require_credentials()
        return {"fs.s3a.access.key": self.access_key, "fs.s3a.secret.key": self.secret_key}


@dataclass(frozen=True)
class IngestSettings:
    """Limits applied while reading raw files into bronze."""

    batch_rows: int = 200_000  # lines a task parses at a time (its memory)
    max_line_bytes: int = 1 << 20
    part_bytes: int = 64 << 20  # a plain file is read in byte ranges of this size, one task each
    file_rows: int = 2_000_000  # rows per bronze Parquet file a task writes (at most)
    plausible_event_us: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.batch_rows < 1 or self.max_line_bytes < 64 or self.part_bytes < 1 or self.file_rows < 1:
            msg = (
                "ingest.batch_rows, ingest.part_bytes and ingest.file_rows must be >= 1 and "
                "ingest.max_line_bytes >= 64"
            )
            raise ConfigError(msg)
        for name, (lo, hi) in self.plausible_event_us.items():
            if lo >= hi:
                msg = f"ingest.plausible_event_us.{name}: lower bound {lo} >= upper bound {hi}"
                raise ConfigError(msg)

    def plausible_range(self, reader: str) -> tuple[int, int]:
        """Plausible event_ts bounds (µs) for a reader; unbounded for readers without an entry."""
        return self.plausible_event_us.get(reader, (-(2**63), 2**63 - 1))


@dataclass(frozen=True)
class DemoSettings:
    """What the main job replays besides the real datasets."""

    preset: str = "hpm_game1"
    synthetic_seconds: float = 20.0
    seed: int = 7
    stream_interval_s: float = 4.0  # arrival-time interval of each stream-join run


@dataclass(frozen=True)
class StreamSettings:
    """Limits every per-interval stream stage (join, aggregates, top-k) applies to its state."""

    # rows of operator state (buffered tuples, open windows, candidates) a stage may carry from one
    # interval to the next; a larger state fails the interval before its state is written
    state_budget_rows: int = 5_000_000
    # arrivals one pass reads at most (its Python worker holds them): a run with more to process (a
    # backlog) makes several passes, cut where bronze's files end, each writing its state
    pass_budget_arrivals: int = 1_000_000

    def __post_init__(self) -> None:
        if self.state_budget_rows < 1:
            msg = f"stream.state_budget_rows must be >= 1, got {self.state_budget_rows}"
            raise ConfigError(msg)
        if self.pass_budget_arrivals < 1:
            msg = f"stream.pass_budget_arrivals must be >= 1, got {self.pass_budget_arrivals}"
            raise ConfigError(msg)


@dataclass(frozen=True)
class QualitySettings:
    """Where quality results go, and what a violated target does to the task."""

    on_violation: str = "fail"  # "fail": the stage raises QualityError; "warn": it only reports
    reports_dir: Path = Path(".local/reports")
    docs_dir: Path = Path(".local/reports/data_docs")  # the published Great Expectations Data Docs
    build_docs: bool = True
    # the cumulative report page is rebuilt by a report at most this often (s); 0: by every report
    cumulative_every_s: float = 0.0
    # a report given a run's name also writes that run's own page; live mode turns this off (four
    # pages a minute that the cumulative page, rebuilt every minute, summarizes anyway)
    run_pages: bool = True
    # the join's promise: recall >= Q_user in at least this share of the closed periods (1.0: in every
    # one); see :meth:`periods_required` for how a run of a few periods judges it
    periods_met: float = 0.95
    # the aggregates' (ε, δ) and the join's promise are shares of windows and periods, top-k's ε_min
    # a mean over windows: a run's are judged with the job's latest before them, this much event time
    # of them at least (a minute's share or mean is mostly sampling noise); see :meth:`windows_judged`
    # and :meth:`periods_borrowed`
    windows_judged_s: float = 600.0

    def __post_init__(self) -> None:
        if self.windows_judged_s < 0:
            msg = f"quality.windows_judged_s must be >= 0, got {self.windows_judged_s}"
            raise ConfigError(msg)
        if not 0.0 < self.periods_met <= 1.0:
            msg = f"quality.periods_met must be in (0, 1], got {self.periods_met}"
            raise ConfigError(msg)
        if self.cumulative_every_s < 0:
            msg = f"quality.cumulative_every_s must be >= 0, got {self.cumulative_every_s}"
            raise ConfigError(msg)
        if self.on_violation not in ("fail", "warn"):
            msg = f"quality.on_violation must be 'fail' or 'warn', got {self.on_violation!r}"
            raise ConfigError(msg)

    @property
    def periods_judged(self) -> int:
        """The fewest periods a join check judges together: one miss in them is within the share.

        >>> QualitySettings(periods_met=0.95).periods_judged, QualitySettings(periods_met=1.0).periods_judged
        (20, 1)
        """
        if self.periods_met >= 1.0:
            return 1
        return math.ceil(1.0 / (1.0 - self.periods_met) - 1e-9)

    def periods_required(self, n: int) -> float:
        """The share of ``n`` periods judged together that must meet Q_user.

        The promise as a budget of misses: ``(1 − share)·n`` of them, and while ``n`` is below
        :attr:`periods_judged` (a young job) the budget of that many, so one missed period in the
        first twenty is within a share of 0.95 as it is in any twenty later. A run judges its periods
        with the job's latest before them, :attr:`periods_judged` at least. Half a miss of slack keeps
        the comparison off floating point's edge.

        >>> q = QualitySettings(periods_met=0.95)
        >>> round(q.periods_required(11), 3), round(q.periods_required(40), 3)
        (0.864, 0.938)
        >>> QualitySettings(periods_met=1.0).periods_required(7)
        1.0
        """
        if n <= 0 or self.periods_met >= 1.0:
            return self.periods_met
        allowed = math.floor((1.0 - self.periods_met) * max(n, self.periods_judged) + 1e-9)
        return max(0.0, 1.0 - (allowed + 0.5) / n) if allowed else 1.0

    def periods_borrowed(self, period_us: int) -> int:
        """The fewest periods a join check judges together: its run's and the job's latest before them.

        :attr:`windows_judged_s` of them, as the aggregates' windows, and :attr:`periods_judged` at
        least. A run of a minute closes a dozen periods of 5 s: judged with only the twenty before them,
        two misses a few minutes apart failed a run while the stream met the share over its hour.

        >>> q = QualitySettings(periods_met=0.95, windows_judged_s=600)
        >>> q.periods_borrowed(5_000_000), q.periods_borrowed(60_000_000), q.periods_borrowed(3_600_000_000)
        (120, 20, 20)
        >>> QualitySettings(periods_met=1.0).periods_borrowed(5_000_000)  # every period: each alone
        1
        """
        if self.periods_met >= 1.0:
            return 1
        return max(self.periods_judged, math.ceil(self.windows_judged_s * 1e6 / period_us - 1e-9))

    def windows_judged(self, slide_us: int) -> int:
        """The fewest windows an aggregate check judges together, for windows sliding by ``slide_us``.

        >>> QualitySettings(windows_judged_s=600).windows_judged(100_000)
        6000
        """
        return max(1, math.ceil(self.windows_judged_s * 1e6 / slide_us - 1e-9))

    @property
    def fail(self) -> bool:
        """Whether a violated target fails the stage."""
        return self.on_violation == "fail"

    def fails(self, override: bool | None) -> bool:
        """A caller's explicit choice, else the configured :attr:`fail`."""
        return self.fail if override is None else override


@dataclass(frozen=True)
class KafkaSettings:
    """Where the Kafka topics of declared sources are (``[kafka]``; OOO_KAFKA_BOOTSTRAP wins)."""

    bootstrap: str = "127.0.0.1:9092"  # infra/kafka.sh's default
    # how long a task waits for a fetch: offsets are listed before reading, so a wait is a broker problem
    poll_timeout_ms: int = 30_000
    # how long a stream stage waits for the ingest to cover its interval before it fails, and how
    # often it looks (the ingest and the stream runs of a minute start together)
    cover_wait_s: float = 50.0
    cover_poll_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.bootstrap.strip():
            msg = "kafka.bootstrap: host:port of a broker, got an empty string"
            raise ConfigError(msg)
        if self.poll_timeout_ms < 100:
            msg = f"kafka.poll_timeout_ms must be at least 100, got {self.poll_timeout_ms}"
            raise ConfigError(msg)
        if self.cover_wait_s < 0 or self.cover_poll_s <= 0:
            msg = (
                "kafka.cover_wait_s must be >= 0 and kafka.cover_poll_s > 0, "
                f"got {self.cover_wait_s} and {self.cover_poll_s}"
            )
            raise ConfigError(msg)


# SQL settings fixed when the server starts (a session cannot change them)
STATIC_SQL_CONF = frozenset(
    {"spark.sql.extensions", "spark.sql.catalog.spark_catalog", "spark.sql.warehouse.dir"}
)


def session_settable(key: str) -> bool:
    """Whether a Spark session may set ``key`` for itself: SQL and Delta settings, except static ones.

    >>> session_settable("spark.sql.adaptive.enabled"), session_settable("spark.driver.memory")
    (True, False)
    """
    return key.startswith(("spark.sql.", "spark.databricks.delta.")) and key not in STATIC_SQL_CONF
