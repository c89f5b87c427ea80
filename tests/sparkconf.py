"""The Spark settings of the tests, for the session the tests share and for the stages they start.

Tests run on tiny data, where planning and code generation cost more than the work: no adaptive
re-planning, no whole-stage code generation (Spark interprets the same expressions, with the same
results), one partition for Delta's log, and a Delta checkpoint every 1,000 commits rather than every
10 (checkpointing a tiny table costs about as much as ten small appends). They cut about a third of
the CPU of a Spark test. The main job's test runs with the production settings (:func:`settings_of`
puts them on the shared session for its run); ``OOO_TEST_SPARK_CONF=production`` runs every test
with them. Standard library only: both venvs' suites use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEST_SPARK_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.databricks.delta.properties.defaults.checkpointInterval": "1000",
}
SHUFFLE_PARTITIONS = 2

# infra/test.sh gives every JVM only the client compiler: most JVMs of a test run live seconds (a
# stage started as a process, an Airflow task's spark-submit), too short for the optimising
# compiler to pay back. The long-lived JVMs of a test run (each pytest run's session-wide driver,
# the Spark Connect servers the DAG tests share) get it back, where Spark's planner runs thousands
# of times, with four times the default invocation counts before a method is optimised: the tests
# run many different plans a few times each, and the optimising compiler spent a third of the
# driver's CPU compiling methods that ran too few more times to pay it back. On the stream stages'
# tests, four times used less CPU than the default counts, than ten times, and than the client
# compiler alone (which costs far more: slower code everywhere).
SESSION_DRIVER_JAVA_OPTIONS = (
    "-XX:TieredStopAtLevel=4 -XX:Tier4InvocationThreshold=20000 -XX:Tier4MinInvocationThreshold=2400 "
    "-XX:Tier4CompileThreshold=60000 -XX:Tier4BackEdgeThreshold=160000"
)


def tiny() -> bool:
    """Whether this run uses the test settings (the default) rather than the production ones."""
    return os.environ.get("OOO_TEST_SPARK_CONF", "tiny") == "tiny"


def stage_env(folder: Path) -> dict[str, str]:
    """Environment for stages started as processes: ``OOO_CONFIG`` naming a file with the test settings.

    Empty under the production settings. A DAG's stage tasks inherit it from the Airflow process
    when the run's ``config`` Param is empty.
    """
    if not tiny():
        return {}
    path = folder / "test-spark.toml"
    conf = "".join(f'"{k}" = "{v}"\n' for k, v in TEST_SPARK_CONF.items())
    path.write_text(f"[spark]\nshuffle_partitions = {SHUFFLE_PARTITIONS}\n[spark.conf]\n{conf}")
    return {"OOO_CONFIG": str(path)}


@contextmanager
def settings_of(spark: Any, conf: Mapping[str, str]) -> Iterator[None]:
    """The shared session with a job's own SQL settings (``Settings.session_conf()``) for the block.

    Every key of either set is set to the job's value or unset (Spark's default), and put back as
    it was afterwards, so the tests after it keep the test settings.
    """
    keys = sorted(set(conf) | set(TEST_SPARK_CONF))
    before = {k: spark.conf.get(k, None) for k in keys}

    def put(values: Mapping[str, str | None]) -> None:
        for k in keys:
            if values.get(k) is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, values[k])

    put(conf)
    try:
        yield
    finally:
        put(before)
