"""Settings: one frozen object built from include/config/outoforder.toml, a user file and the environment.

Only the standard library is imported here, because DAG files in the Airflow venv import this module
at parse time to find paths (they must stay cheap to parse).

>>> s = load_settings(env={"OOO_SPARK_MASTER": "local[1]"})
>>> s.spark.master
'local[1]'
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outoforder.errors import ConfigError
from outoforder.sources.declaration import Declaration, parse_declarations

REPO_ROOT = Path(__file__).resolve().parents[2]
# the readers in outoforder.sources.readers (kept here: this module stays standard-library only)
BUILTIN_READERS = ("debs2013", "soccer_synthetic", "ooo", "debs2015")
DEFAULT_CONFIG = REPO_ROOT / "include" / "config" / "outoforder.toml"


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


# Delta's log store for an s3a lake (infra/jvm/logstore/S3ConditionalLogStore.java)
S3_LOG_STORE = "io.outoforder.delta.S3ConditionalLogStore"


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

    def __post_init__(self) -> None:
        if self.state_budget_rows < 1:
            msg = f"stream.state_budget_rows must be >= 1, got {self.state_budget_rows}"
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

    def __post_init__(self) -> None:
        if self.cumulative_every_s < 0:
            msg = f"quality.cumulative_every_s must be >= 0, got {self.cumulative_every_s}"
            raise ConfigError(msg)
        if self.on_violation not in ("fail", "warn"):
            msg = f"quality.on_violation must be 'fail' or 'warn', got {self.on_violation!r}"
            raise ConfigError(msg)

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


@dataclass(frozen=True)
class Settings:
    """All settings; build with :func:`load_settings`.

    ``lake_root`` is a local folder (kept as an absolute path string) or an ``s3a://`` URI.
    ``work_root`` is the local folder for the driver's own files (landing copies, the scheduler's
    status files, benchmarks); by default the lake's parent folder, or ``.local`` for a remote lake.
    """

    lake_root: str
    data_dir: Path
    spark: SparkSettings
    ingest: IngestSettings
    demo: DemoSettings
    quality: QualitySettings = field(default_factory=QualitySettings)
    stream: StreamSettings = field(default_factory=StreamSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    work_root: Path | None = None
    sources: Mapping[str, Declaration] = field(default_factory=dict)  # declared sources, by name
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    # [dags]: defaults of the DAGs' Params; "" holds the keys for every DAG, else a job or DAG's
    dags: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # accept a Path (tests and callers build settings with dataclasses.replace)
        object.__setattr__(self, "lake_root", _lake(str(self.lake_root)))

    @property
    def lake_is_remote(self) -> bool:
        """Whether the lake is on object storage."""
        return is_remote(self.lake_root)

    @property
    def work_dir(self) -> Path:
        """Local folder for the driver's own files (see the class docstring)."""
        return self.work_root or _default_work_dir(self.lake_root)

    def jar_paths(self) -> list[str]:
        """Every jar a session needs: Delta's, and s3a's when the lake is on object storage."""
        jars = self.spark.jar_paths()
        return jars + self.storage.jar_paths() if self.lake_is_remote else jars

    def spark_conf(self, with_jars: bool = True, with_credentials: bool = False) -> dict[str, str]:
        """Every Spark setting, as strings, for the session builder and for spark-submit.

        The jars go on the driver's and the executors' class path rather than ``spark.jars``:
        ``spark.jars`` would copy them (650 MB with s3a) into every executor's folder for every
        application. A cluster's workers therefore need the jar cache at the same path (true for
        the loopback cluster of infra/spark-cluster.sh; docker-compose mounts it).
        ``with_jars=False`` leaves them out (Airflow resolves them when a task runs, so a DAG file
        parses even where the jar cache is not set up). The object store's keys are left out
        unless ``with_credentials`` (for a file only its owner reads, such as the Spark Connect
        server's properties): what a launcher is given ends up on a command line.
        """
        conf = self.spark.to_conf()
        if self.lake_is_remote:
            conf |= self.storage.to_conf()
            if with_credentials:
                conf |= {f"spark.hadoop.{k}": v for k, v in self.storage.credentials().items()}
        if with_jars:
            path = ":".join(self.jar_paths())
            conf |= {"spark.driver.extraClassPath": path, "spark.executor.extraClassPath": path}
        conf.update(self.spark.conf)
        return conf

    def dag_param_defaults(self, *names: str) -> dict[str, Any]:
        """``[dags]``'s Param defaults for a DAG: the keys every DAG takes, then its own tables'.

        ``names`` are the tables that apply, in order (a job's, e.g. ``join``, then the DAG id's).

        >>> s = load_settings(env={})
        >>> s2 = __import__("dataclasses").replace(s, dags={"": {"source": "a"}, "join": {"q_user": 0.9}})
        >>> s2.dag_param_defaults("join", "join_stream")
        {'source': 'a', 'q_user': 0.9}
        """
        out = dict(self.dags.get("", {}))
        for name in names:
            out |= self.dags.get(name, {})
        return out

    def session_conf(self) -> dict[str, str]:
        """The settings one Spark session may set for itself (SQL and Delta settings that are not static).

        What a client of the shared Spark Connect server sets on its own session; the server was
        started with all of :meth:`spark_conf`.
        """
        return {k: v for k, v in self.spark_conf(with_jars=False).items() if session_settable(k)}


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


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# tables whose keys are the user's own names (Spark properties, stages, sources, DAGs, readers)
FREE_TABLES = frozenset({"spark.conf", "spark.stage_conf", "ingest.plausible_event_us", "sources", "dags"})


def check_keys(user: Mapping[str, Any], known: Mapping[str, Any], where: str = "") -> None:
    """Refuse a key of a settings file that the defaults do not have, naming the nearest known one.

    A misspelt key (``rooot``) would otherwise be ignored and its setting silently left at the
    default. ``known`` is the defaults file's content; the :data:`FREE_TABLES` take any key.
    """
    import difflib

    if where in FREE_TABLES:
        return
    for key, value in user.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            near = difflib.get_close_matches(key, list(known), n=1)
            hint = f"; did you mean {f'{where}.' if where else ''}{near[0]}?" if near else ""
            table = f"[{where}]" if where else "the top level"
            msg = f"unknown setting {path!r} in {table}{hint} (known: {', '.join(sorted(known))})"
            raise ConfigError(msg)
        if isinstance(value, Mapping) and isinstance(known[key], Mapping):
            check_keys(value, known[key], path)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as e:
        msg = f"config file not found: {path}"
        raise ConfigError(msg) from e
    except tomllib.TOMLDecodeError as e:
        msg = f"config file {path} is not valid TOML: {e}"
        raise ConfigError(msg) from e


def _lake(value: str) -> str:
    if is_remote(value):
        scheme = value.split("://", 1)[0]
        if scheme != "s3a":
            msg = f"lake.root: only local folders and s3a:// URIs are supported, got {value!r}"
            raise ConfigError(msg)
        return value.rstrip("/")
    return str(_path(value))


def _default_work_dir(lake_root: str) -> Path:
    return REPO_ROOT / ".local" if is_remote(lake_root) else Path(lake_root).parent


def _path(value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (REPO_ROOT / p).resolve()


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    msg = f"expected a boolean, got {value!r}"
    raise ValueError(msg)


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build the settings: defaults file, then ``config_file`` (or ``$OOO_CONFIG``), then env vars."""
    env = os.environ if env is None else env
    raw = _read_toml(DEFAULT_CONFIG)
    user_file = config_file or env.get("OOO_CONFIG")
    if user_file:
        user = _read_toml(Path(user_file))
        try:
            check_keys(user, raw)
        except ConfigError as e:
            msg = f"{user_file}: {e}"
            raise ConfigError(msg) from e
        raw = _merge(raw, user)
    try:
        lake, data, spark, ingest, demo, quality, stream = (
            raw.get("lake", {}),
            raw.get("data", {}),
            dict(raw.get("spark", {})),
            raw.get("ingest", {}),
            raw.get("demo", {}),
            raw.get("quality", {}),
            raw.get("stream", {}),
        )
        spark_conf = {str(k): str(v) for k, v in spark.pop("conf", {}).items()}
        stage_conf = {
            str(stage): {str(k): str(v) for k, v in conf.items()}
            for stage, conf in spark.pop("stage_conf", {}).items()
        }
        spark_settings = SparkSettings(
            master=env.get("OOO_SPARK_MASTER", spark.get("master", "local[2]")),
            remote=env.get("OOO_SPARK_REMOTE", spark.get("remote", "")),
            shuffle_partitions=int(spark.get("shuffle_partitions", 4)),
            driver_memory=str(spark.get("driver_memory", "3g")),
            jars_dir=env.get("OOO_SPARK_JARS_DIR", spark.get("jars_dir", "")),
            log_level=str(spark.get("log_level", "WARN")),
            conf=spark_conf,
            stage_conf=stage_conf,
        )
        lake_root = _lake(env.get("OOO_LAKE_ROOT", lake.get("root", ".local/lake")))
        work = env.get("OOO_WORK_DIR", lake.get("work_dir", ""))
        work_root = _path(work) if work else None
        storage = raw.get("storage", {})
        storage_settings = StorageSettings(
            endpoint=env.get("OOO_S3_ENDPOINT", storage.get("endpoint", "http://127.0.0.1:9000")),
            access_key=env.get("OOO_S3_ACCESS_KEY", storage.get("access_key", "")),
            secret_key=env.get("OOO_S3_SECRET_KEY", storage.get("secret_key", "")),
            region=str(storage.get("region", "us-east-1")),
            path_style=_flag(storage.get("path_style", True)),
            jars_dir=env.get("OOO_S3A_JARS_DIR", storage.get("jars_dir", "")),
            landing_uri=env.get("OOO_LANDING_URI", storage.get("landing_uri", "s3a://landing")),
            publish_uri=env.get("OOO_PUBLISH_URI", storage.get("publish_uri", "")),
        )
        # next to the lake by default, so a lake of its own (tests, a second job) keeps its reports
        work_dir = work_root or _default_work_dir(lake_root)
        reports = env.get("OOO_REPORTS_DIR", quality.get("reports_dir", "")) or str(work_dir / "reports")
        docs = env.get("OOO_DOCS_DIR", quality.get("docs_dir", "")) or str(Path(reports) / "data_docs")
        bounds = {str(k): (int(v[0]), int(v[1])) for k, v in ingest.get("plausible_event_us", {}).items()}
        sources = parse_declarations(raw.get("sources", {}))
        kafka = raw.get("kafka", {})
        kafka_settings = KafkaSettings(
            bootstrap=str(env.get("OOO_KAFKA_BOOTSTRAP", kafka.get("bootstrap", KafkaSettings.bootstrap))),
            poll_timeout_ms=int(kafka.get("poll_timeout_ms", KafkaSettings.poll_timeout_ms)),
            cover_wait_s=float(kafka.get("cover_wait_s", KafkaSettings.cover_wait_s)),
            cover_poll_s=float(kafka.get("cover_poll_s", KafkaSettings.cover_poll_s)),
        )
        for name, decl in sources.items():
            if name in BUILTIN_READERS:
                msg = f"sources.{name}: {name!r} is a built-in reader's name; choose another"
                raise ConfigError(msg)
            if name in bounds:
                msg = f"ingest.plausible_event_us.{name}: give a declared source's bounds in sources.{name}"
                raise ConfigError(msg)
            bounds[name] = decl.plausible_event_us
        dags: dict[str, dict[str, Any]] = {"": {}}
        for key, value in raw.get("dags", {}).items():
            if isinstance(value, Mapping):
                dags[str(key)] = dict(value)
            else:
                dags[""][str(key)] = value
        return Settings(
            dags=dags,
            lake_root=lake_root,
            data_dir=_path(env.get("OOO_DATA_DIR", data.get("shared_dir", "../shared/data"))),
            spark=spark_settings,
            ingest=IngestSettings(
                batch_rows=int(ingest.get("batch_rows", IngestSettings.batch_rows)),
                max_line_bytes=int(ingest.get("max_line_bytes", IngestSettings.max_line_bytes)),
                part_bytes=int(ingest.get("part_bytes", IngestSettings.part_bytes)),
                file_rows=int(ingest.get("file_rows", IngestSettings.file_rows)),
                plausible_event_us=bounds,
            ),
            demo=DemoSettings(
                preset=str(demo.get("preset", "hpm_game1")),
                synthetic_seconds=float(demo.get("synthetic_seconds", 20.0)),
                seed=int(demo.get("seed", 7)),
                stream_interval_s=float(demo.get("stream_interval_s", 4.0)),
            ),
            quality=QualitySettings(
                on_violation=str(env.get("OOO_ON_VIOLATION", quality.get("on_violation", "fail"))),
                reports_dir=_path(reports),
                docs_dir=_path(docs),
                build_docs=_flag(env.get("OOO_BUILD_DOCS", quality.get("build_docs", True))),
                cumulative_every_s=float(
                    quality.get("cumulative_every_s", QualitySettings.cumulative_every_s)
                ),
                run_pages=_flag(quality.get("run_pages", QualitySettings.run_pages)),
            ),
            stream=StreamSettings(
                state_budget_rows=int(
                    env.get("OOO_STATE_BUDGET_ROWS", stream.get("state_budget_rows", 5_000_000))
                )
            ),
            storage=storage_settings,
            work_root=work_root,
            sources=sources,
            kafka=kafka_settings,
        )
    except ConfigError:
        raise  # already names the setting
    except (TypeError, ValueError, IndexError) as e:
        msg = f"invalid setting: {e}"
        raise ConfigError(msg) from e
