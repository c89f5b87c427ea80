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
from tests import sparkconf

DATA = load_settings().data_dir
# a scheduler's minute of the stream stages' test streams (1,200-2,000 arrivals): a few runs each
MINUTE_ARRIVALS = 500
# an operator package of its own, put on the path only by the tests that install it: importing its
# modules for doctests would put it on the path (and in the registry) of every test after
collect_ignore = ["toy_operator"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test using the Spark session is a ``spark`` test, marked or not (the fast tier leaves them out)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("spark"):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.fail(f"shared data folder not found at {DATA} (set OOO_DATA_DIR)")
    return DATA


@pytest.fixture(scope="session")
def base_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    s = load_settings()
    conf = dict(s.spark.conf)
    if sparkconf.tiny():
        conf |= sparkconf.TEST_SPARK_CONF
    spark = dataclasses.replace(
        s.spark, shuffle_partitions=sparkconf.SHUFFLE_PARTITIONS, driver_memory="3g", conf=conf
    )
    ingest = dataclasses.replace(s.ingest, batch_rows=5_000)
    root = tmp_path_factory.mktemp("lake-session")
    # no Data Docs (GX renders every validation to HTML): tests/spark/test_quality.py turns them on
    # and checks them, and the Airflow tests check them on the pages a run links
    quality = dataclasses.replace(
        s.quality, reports_dir=root / "reports", docs_dir=root / "reports" / "data_docs", build_docs=False
    )
    return dataclasses.replace(s, spark=spark, ingest=ingest, lake_root=root / "lake", quality=quality)


@pytest.fixture(scope="session")
def spark(base_settings: Settings) -> Iterator[object]:
    from outoforder.spark.session import get_spark

    conf = {
        **base_settings.spark.conf,
        "spark.driver.extraJavaOptions": sparkconf.SESSION_DRIVER_JAVA_OPTIONS,
    }
    driver = dataclasses.replace(base_settings, spark=dataclasses.replace(base_settings.spark, conf=conf))
    session = get_spark(driver, app_name="outoforder-tests")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _nothing_left_cached(request: pytest.FixtureRequest) -> Iterator[None]:
    """A Spark test leaves nothing cached: in the long-lived server a frame left cached (say by a
    stage that failed between its ``persist`` and its ``unpersist``) stays for good, and every later
    write plans against it."""
    yield
    if "spark" not in request.fixturenames:
        return
    manager = request.getfixturevalue("spark")._jsparkSession.sharedState().cacheManager()
    if not manager.isEmpty():
        request.getfixturevalue("spark").catalog.clearCache()  # the next test starts clean
        pytest.fail("the test left frames cached in the Spark session (a persist without its unpersist)")


@pytest.fixture
def settings(base_settings: Settings, tmp_path: Path) -> Settings:
    """Settings with a fresh, empty lake (and reports folder) for one test."""
    reports = tmp_path / "reports"
    quality = dataclasses.replace(base_settings.quality, reports_dir=reports, docs_dir=reports / "data_docs")
    return dataclasses.replace(base_settings, lake_root=tmp_path / "lake", quality=quality)


@pytest.fixture
def load_bronze(spark, settings: Settings):
    """Write a frame of arrivals (``stream``, ``event_ts`` and any measures) as one bronze source.

    Row order is arrival order: ``arrival_seq`` counts from ``first_seq``; missing columns are null.
    ``files``: that many appends of consecutive arrivals (an ingest's files), instead of one.
    """
    import numpy as np

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    def load(
        frame,
        source: str,
        first_seq: int = 0,
        t0: int = 1_700_000_000_000_000,
        step: int = 1_000,
        lake=None,
        files: int = 1,
    ):
        n = len(frame)
        pdf = frame.assign(
            source=source,
            key=frame.get("key", "k"),
            arrival_seq=np.arange(first_seq, first_seq + n),
            arrival_ts=t0 + np.arange(n) * step,
            row_hash=np.arange(n),
            ingest_id="test",
            source_file="test",
            line_no=np.arange(1, n + 1),
        )
        for col in ("x", "y", "z", "value", "attrs"):
            if col not in pdf:
                pdf[col] = None
        rows = [tuple(r) for r in pdf[BRONZE.schema.fieldNames()].itertuples(index=False)]
        for part in range(files):
            mine = rows[part * n // files : (part + 1) * n // files]
            # a plain append (one job): a transaction id would cost a reconstruction of bronze's state
            df = spark.createDataFrame(mine, BRONZE.schema)
            delta.append(df, BRONZE, lake or settings.lake_root, f"test-{source}-{part}")

    return load


@pytest.fixture
def run_at_cadences(spark, settings: Settings, load_bronze, monkeypatch):
    """Run a stream stage over one stream at three cadences, each in a lake of its own; returns the lakes.

    ``one``: a single run; ``minutes``: runs of :data:`MINUTE_ARRIVALS` (a scheduler's minute), the second one
    first killed between its outputs and its state (the run after it must clear what it left);
    ``random``: runs of random lengths over bronze in four appends, with a pass budget of a quarter
    of the arrivals (the longer runs make several passes). ``only``: those cadences (``one`` among
    them: the others are compared with it).
    Arrival i of ``frame`` arrives at ``T0 + i·1 ms``, numbered from ``first_seq``.
    """
    from dataclasses import replace

    import numpy as np

    from outoforder.io import delta
    from outoforder.stages.context import StageContext

    t0, step = 1_700_000_000_000_000, 1_000

    def run(
        stage,
        job,
        frame,
        source: str,
        seed: int,
        n_random: int = 5,
        first_seq: int = 0,
        only: tuple[str, ...] | None = None,
    ):
        n = len(frame)
        cadences = {
            "one": [n],
            "minutes": [*range(MINUTE_ARRIVALS, n, MINUTE_ARRIVALS), n],
            "random": [*sorted(set(np.random.default_rng(seed).integers(1, n, n_random).tolist())), n],
        }
        cadences = {k: v for k, v in cadences.items() if only is None or k in only}
        real_append = delta.append

        def dies_at_state(df, table, lake_root, tag):
            if table is stage.state_table:
                raise KeyboardInterrupt
            real_append(df, table, lake_root, tag)

        lakes = {}
        for name, cuts in cadences.items():
            lake = f"{settings.lake_root}-{name}"
            load_bronze(frame, source, first_seq=first_seq, lake=lake, files=4 if name == "random" else 1)
            stream = replace(settings.stream, pass_budget_arrivals=n // 4 if name == "random" else n)
            ctx = StageContext.of(spark, replace(settings, lake_root=lake, stream=stream), source, job)
            for i, cut in enumerate(cuts):
                if name == "minutes" and i == 1:
                    monkeypatch.setattr(delta, "append", dies_at_state)
                    with pytest.raises(KeyboardInterrupt):
                        stage(ctx).run(None, t0 + cut * step)
                    monkeypatch.setattr(delta, "append", real_append)
                summary = stage(ctx).run(t0 if i == 0 else None, t0 + cut * step)
                assert summary is not None and summary.arrivals > 0, (name, cut)
            passes = stage(ctx).position().passes
            if name == "random":  # runs longer than the budget made several passes
                assert passes > len(cuts) and passes >= -(-n // stream.pass_budget_arrivals), passes
            else:
                assert passes == len(cuts), (name, passes)
            lakes[name] = lake
        return lakes

    return run
