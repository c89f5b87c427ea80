"""The Spark settings of the tests, for the session the tests share and for the stages they start.

Tests run on tiny data, where planning and code generation cost more than the work: no adaptive
re-planning, no whole-stage code generation (Spark interprets the same expressions, with the same
results), one partition for Delta's log. They cut about a third of the CPU of a Spark test. The
end-to-end tests of the Spark venv run with the production settings (infra/test.sh sets
``OOO_TEST_SPARK_CONF=production``). Standard library only: both venvs' suites use it.
"""

from __future__ import annotations

import os
from pathlib import Path

TEST_SPARK_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.databricks.delta.snapshotPartitions": "1",
}
SHUFFLE_PARTITIONS = 2


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
