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

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "include" / "config" / "outoforder.toml"


@dataclass(frozen=True)
class SparkSettings:
    """How the SparkSession is built (see :mod:`outoforder.spark.session`)."""

    master: str = "local[2]"
    shuffle_partitions: int = 4
    driver_memory: str = "3g"
    jars_dir: str = ""
    log_level: str = "WARN"
    conf: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.shuffle_partitions <= 10_000:
            msg = f"spark.shuffle_partitions must be in 1..10000, got {self.shuffle_partitions}"
            raise ConfigError(msg)

    def jar_paths(self) -> list[str]:
        """The Delta jars to pass as ``spark.jars``; fails clearly when setup has not fetched them."""
        if not self.jars_dir:
            msg = "no Delta jar folder configured: run infra/setup.sh, or set OOO_SPARK_JARS_DIR"
            raise ConfigError(msg)
        folder = Path(self.jars_dir)
        jars = sorted(str(p) for p in folder.glob("*.jar"))
        if not jars:
            msg = f"no jars in {folder}: run infra/setup.sh to fetch Delta's jars with Maven"
            raise ConfigError(msg)
        return jars

    def to_conf(self, with_jars: bool = True) -> dict[str, str]:
        """Every Spark setting the project relies on, as strings (session builder and spark-submit).

        ``with_jars=False`` leaves out ``spark.jars`` (Airflow resolves it when a task runs, so a
        DAG file parses even where the jar cache is not set up).
        """
        conf = {"spark.jars": ",".join(self.jar_paths())} if with_jars else {}
        conf |= {
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.default.parallelism": str(self.shuffle_partitions),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": self.driver_memory,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            # Delta reads its log with 50 partitions by default: far too many on 2 cores.
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.execution.arrow.pyspark.enabled": "true",
            # Constraint propagation fails on unions of checkpointed, filtered micro-batch state
            # ("key not found" in UnionBase.rewriteConstraints, Spark 4.2); it only prunes filters.
            "spark.sql.constraintPropagation.enabled": "false",
            # The stream stages checkpoint every micro-batch's state (localCheckpoint); its blocks
            # are freed only after a driver GC finds the RDD unreachable. The default period
            # (30 min) lets a long-lived session fill the driver heap with dead blocks.
            "spark.cleaner.periodicGC.interval": "2min",
        }
        conf.update(self.conf)
        return conf


@dataclass(frozen=True)
class IngestSettings:
    """Limits applied while reading raw files into bronze."""

    batch_rows: int = 200_000
    max_line_bytes: int = 1 << 20
    plausible_event_us: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.batch_rows < 1 or self.max_line_bytes < 64:
            msg = "ingest.batch_rows must be >= 1 and ingest.max_line_bytes >= 64"
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
class QualitySettings:
    """Where quality results go, and what a violated target does to the task."""

    on_violation: str = "fail"  # "fail": the stage raises QualityError; "warn": it only reports
    reports_dir: Path = Path(".local/reports")
    docs_dir: Path = Path(".local/reports/data_docs")  # the published Great Expectations Data Docs
    build_docs: bool = True

    def __post_init__(self) -> None:
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
class Settings:
    """All settings; build with :func:`load_settings`."""

    lake_root: Path
    data_dir: Path
    spark: SparkSettings
    ingest: IngestSettings
    demo: DemoSettings
    quality: QualitySettings = field(default_factory=QualitySettings)


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


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
        raw = _merge(raw, _read_toml(Path(user_file)))
    try:
        lake, data, spark, ingest, demo, quality = (
            raw.get("lake", {}),
            raw.get("data", {}),
            dict(raw.get("spark", {})),
            raw.get("ingest", {}),
            raw.get("demo", {}),
            raw.get("quality", {}),
        )
        spark_conf = {str(k): str(v) for k, v in spark.pop("conf", {}).items()}
        spark_settings = SparkSettings(
            master=env.get("OOO_SPARK_MASTER", spark.get("master", "local[2]")),
            shuffle_partitions=int(spark.get("shuffle_partitions", 4)),
            driver_memory=str(spark.get("driver_memory", "3g")),
            jars_dir=env.get("OOO_SPARK_JARS_DIR", spark.get("jars_dir", "")),
            log_level=str(spark.get("log_level", "WARN")),
            conf=spark_conf,
        )
        lake_root = _path(env.get("OOO_LAKE_ROOT", lake.get("root", ".local/lake")))
        # next to the lake by default, so a lake of its own (tests, a second job) keeps its reports
        reports = env.get("OOO_REPORTS_DIR", quality.get("reports_dir", "")) or str(
            lake_root.parent / "reports"
        )
        docs = env.get("OOO_DOCS_DIR", quality.get("docs_dir", "")) or str(Path(reports) / "data_docs")
        bounds = {str(k): (int(v[0]), int(v[1])) for k, v in ingest.get("plausible_event_us", {}).items()}
        return Settings(
            lake_root=lake_root,
            data_dir=_path(env.get("OOO_DATA_DIR", data.get("shared_dir", "../shared/data"))),
            spark=spark_settings,
            ingest=IngestSettings(
                batch_rows=int(ingest.get("batch_rows", 200_000)),
                max_line_bytes=int(ingest.get("max_line_bytes", 1 << 20)),
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
            ),
        )
    except (TypeError, ValueError, IndexError) as e:
        msg = f"invalid setting: {e}"
        raise ConfigError(msg) from e
