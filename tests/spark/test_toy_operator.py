"""The toy operator's Spark step runs through the CLI on the shared session; no project file touched."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from outoforder.stages import registry
from outoforder.stages.cli import main
from tests.test_operator_registry import TOY

pytestmark = pytest.mark.spark


def test_the_toy_stage_counts_a_files_arrivals_per_window_with_its_spark_step(
    spark, tmp_path, monkeypatch, capsys
):
    monkeypatch.syspath_prepend(str(TOY))
    registry.operators.cache_clear()
    ts = [0, 150_000, 999_999, 1_000_000, 2_500_000, 2_600_000, 2_700_000]
    pd.DataFrame({"event_ts": ts}).to_csv(tmp_path / "a.csv", index=False)
    try:
        assert (
            main(["toy-stream", "--source", "mine", "--file", str(tmp_path / "a.csv"), "--window-s", "1"])
            == 0
        )
    finally:
        registry.operators.cache_clear()
        for name in [m for m in sys.modules if m.split(".")[0] == "toy_ooo"]:
            del sys.modules[name]
    assert "[toy] 3 windows: [(0, 3), (1, 1), (2, 3)]" in capsys.readouterr().out
