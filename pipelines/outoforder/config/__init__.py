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

from outoforder.config.sections import (
    DemoSettings,
    IngestSettings,
    KafkaSettings,
    QualitySettings,
    SparkSettings,
    StorageSettings,
    StreamSettings,
    is_remote,
    session_settable,
)
from outoforder.errors import ConfigError
from outoforder.sources.declaration import Declaration, parse_declarations

__all__ = [
    "BUILTIN_READERS",
    "DEFAULT_CONFIG",
    "REPO_ROOT",
    "DemoSettings",
    "IngestSettings",
    "KafkaSettings",
    "QualitySettings",
    "Settings",
    "SparkSettings",
    "StorageSettings",
    "StreamSettings",
    "is_remote",
    "load_settings",
    "session_settable",
]

REPO_ROOT = Path(__file__).resolve().parents[3]
# the readers in outoforder.sources.readers (kept here: this module stays standard-library only)
BUILTIN_READERS = ("debs2013", "soccer_synthetic", "ooo", "debs2015")
DEFAULT_CONFIG = REPO_ROOT / "include" / "config" / "outoforder.toml"


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
                periods_met=float(quality.get("periods_met", QualitySettings.periods_met)),
                windows_judged_s=float(quality.get("windows_judged_s", QualitySettings.windows_judged_s)),
            ),
            stream=StreamSettings(
                state_budget_rows=int(
                    env.get("OOO_STATE_BUDGET_ROWS", stream.get("state_budget_rows", 5_000_000))
                ),
                pass_budget_arrivals=int(
                    env.get(
                        "OOO_PASS_BUDGET_ARRIVALS",
                        stream.get("pass_budget_arrivals", StreamSettings.pass_budget_arrivals),
                    )
                ),
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
