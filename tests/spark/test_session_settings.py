"""A stage run in-process uses the running session as it is: its settings file does not leak into it.

The tests share one Spark session with test settings (tests/sparkconf.py); a CLI call in the same
process used to re-apply the production settings to it (adaptive execution on, four shuffle
partitions) for the rest of the run.
"""

from __future__ import annotations

from pathlib import Path

from outoforder.stages.cli import main

WATCHED = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")


def test_an_in_process_stage_keeps_the_running_sessions_settings(spark, settings, tmp_path: Path) -> None:
    before = {k: spark.conf.get(k) for k in WATCHED}
    config = tmp_path / "other.toml"
    config.write_text(
        f'[lake]\nroot = "{settings.lake_root}"\n'
        "[spark]\nshuffle_partitions = 7\n"
        '[spark.conf]\n"spark.sql.adaptive.enabled" = "true"\n'
    )
    assert main(["--config", str(config), "checksum", "--json"]) == 0
    assert {k: spark.conf.get(k) for k in WATCHED} == before


def test_the_main_jobs_settings_hold_for_its_block_and_the_tests_ones_after(spark) -> None:
    from outoforder.config import load_settings
    from tests import sparkconf

    keys = sorted(set(sparkconf.TEST_SPARK_CONF) | set(WATCHED))
    before = {k: spark.conf.get(k, None) for k in keys}
    shipped = load_settings(env={}).session_conf()
    with sparkconf.settings_of(spark, shipped):
        assert spark.conf.get("spark.sql.adaptive.enabled") == shipped["spark.sql.adaptive.enabled"] == "true"
        assert spark.conf.get("spark.sql.shuffle.partitions") == shipped["spark.sql.shuffle.partitions"]
        assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"  # not shipped: Spark's default
    assert {k: spark.conf.get(k, None) for k in keys} == before
