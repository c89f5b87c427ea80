"""Shared fixtures: one Delta-enabled SparkSession for the whole run, lakes in tmp folders.

The suite runs in two venvs (README): tests/airflow with the Airflow venv, the rest with the Spark
venv (infra/test.sh runs both). Nothing here imports pyspark at module level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from outoforder.config import Settings, load_settings

DATA = load_settings().data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.fail(f"shared data folder not found at {DATA} (set OOO_DATA_DIR)")
    return DATA


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    s = load_settings()
    spark = dataclasses.replace(s.spark, shuffle_partitions=2, driver_memory="2g")
    ingest = dataclasses.replace(s.ingest, batch_rows=5_000)
    return dataclasses.replace(
        s, spark=spark, ingest=ingest, lake_root=tmp_path_factory.mktemp("lake-session") / "lake"
    )


@pytest.fixture(scope="session")
def spark(base_settings: Settings) -> Iterator[object]:
    from outoforder.spark.session import get_spark

    session = get_spark(base_settings, app_name="outoforder-tests")
    yield session
    session.stop()


@pytest.fixture
def settings(base_settings: Settings, tmp_path: Path) -> Settings:
    """Settings with a fresh, empty lake for one test."""
    return dataclasses.replace(base_settings, lake_root=tmp_path / "lake")
