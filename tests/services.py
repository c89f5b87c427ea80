"""The project's own services for the tests: Spark Connect, MinIO, a Spark cluster, PostgreSQL, Kafka.

Each is started by its infra script (the same one a user runs) on free loopback ports, with its data
and logs in a test folder, and stopped afterwards. Standard library only: the Spark-venv and the
Airflow-venv suites both use it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import sparkconf

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _script(name: str, action: str, env: dict[str, str], *args: str, timeout: int = 900) -> str:
    done = subprocess.run(
        ["bash", str(REPO / "infra" / name), action, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        out = done.stdout[-3000:] + done.stderr[-3000:]
        msg = f"infra/{name} {action} failed ({done.returncode}):\n{out}"
        raise RuntimeError(msg)
    return done.stdout


def _exports(text: str) -> dict[str, str]:
    """``export K='v'`` lines (an infra script's ``env`` action) as a dict."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            out[key] = value.strip("'")
    return out


@contextmanager
def minio(folder: Path) -> Iterator[dict[str, str]]:
    """MinIO with the lake, landing and reports buckets; yields the OOO_S3_* settings."""
    env = {
        **os.environ,
        "OOO_MINIO_PORT": str(free_port()),
        "OOO_MINIO_CONSOLE_PORT": str(free_port()),
        "OOO_MINIO_DATA": str(folder / "minio"),
    }
    try:
        _script("minio.sh", "start", env)
        yield _exports(_script("minio.sh", "env", env))
    finally:
        _script("minio.sh", "stop", env, timeout=60)


@contextmanager
def kafka(folder: Path) -> Iterator[dict[str, str]]:
    """A single-node Kafka broker (KRaft); yields OOO_KAFKA_BOOTSTRAP."""
    env = {
        **os.environ,
        "OOO_KAFKA_PORT": str(free_port()),
        "OOO_KAFKA_CONTROLLER_PORT": str(free_port()),
        "OOO_KAFKA_DATA": str(folder / "kafka"),
    }
    try:
        _script("kafka.sh", "start", env)
        yield _exports(_script("kafka.sh", "env", env))
    finally:
        _script("kafka.sh", "stop", env, timeout=60)


@contextmanager
def spark_cluster(
    folder: Path, workers: int = 1, cores: int = 2, memory: str = "3g"
) -> Iterator[dict[str, str]]:
    """A Spark standalone master and workers; yields OOO_SPARK_MASTER."""
    env = {
        **os.environ,
        "OOO_SPARK_MASTER_PORT": str(free_port()),
        "OOO_SPARK_MASTER_UI_PORT": str(free_port()),
        "OOO_SPARK_CLUSTER_DIR": str(folder / "spark-cluster"),
        "OOO_SPARK_WORKER_UI_PORT": "0",
    }
    try:
        size = ("--workers", str(workers), "--cores", str(cores), "--memory", memory)
        _script("spark-cluster.sh", "start", env, *size)
        yield _exports(_script("spark-cluster.sh", "env", env))
    finally:
        _script("spark-cluster.sh", "stop", env, timeout=120)


@contextmanager
def postgres(folder: Path) -> Iterator[dict[str, str]]:
    """PostgreSQL for Airflow's metadata; yields AIRFLOW__DATABASE__SQL_ALCHEMY_CONN."""
    # PostgreSQL runs as the postgres user under root: its folder must be reachable by that user,
    # which pytest's private (0700) tmp folders are not
    data = Path(tempfile.mkdtemp(prefix="ooo-pg-", dir="/tmp" if os.geteuid() == 0 else folder))
    data.chmod(0o755)
    env = {**os.environ, "OOO_PG_PORT": str(free_port()), "OOO_PG_DATA": str(data / "data")}
    try:
        _script("postgres.sh", "start", env, timeout=300)
        yield _exports(_script("postgres.sh", "env", env))
    finally:
        _script("postgres.sh", "stop", env, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


def connect_env(folder: Path) -> dict[str, str]:
    """Where a Spark Connect server of the tests listens and keeps its state (free loopback ports)."""
    return {
        "OOO_SPARK_CONNECT_PORT": str(free_port()),
        "OOO_SPARK_CONNECT_UI_PORT": str(free_port()),
        "OOO_SPARK_CONNECT_DIR": str(folder / "spark-connect"),
        "OOO_SPARK_CONNECT_JAVA_OPTIONS": sparkconf.SESSION_DRIVER_JAVA_OPTIONS,  # a long-lived JVM
    }


def connect_client(env: dict[str, str]) -> dict[str, str]:
    """What makes a stage a client of the server ``env`` names (its address and its secret)."""
    token = Path(env["OOO_SPARK_CONNECT_DIR"], "token").read_text().strip()
    return {
        "OOO_SPARK_REMOTE": f"sc://localhost:{env['OOO_SPARK_CONNECT_PORT']}",
        "SPARK_CONNECT_AUTHENTICATE_TOKEN": token,
    }


@contextmanager
def spark_connect(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The shared Spark Connect server at ``env``'s :func:`connect_env`; yields its clients' settings."""
    env = {**os.environ, **env}
    try:
        _script("spark-connect.sh", "start", env, timeout=600)
        yield connect_client(env)
    finally:
        _script("spark-connect.sh", "stop", env, timeout=120)
