"""The scale benchmark's own parts: its summary per part and its report, from made-up records."""

import pytest

from benchmarks.scale import _runs, part_tables, render, summarize
from outoforder.errors import StateError


def _part(part, seconds, intervals=(), **extra):
    return {
        "run": "full", "part": part, "seconds": seconds, "intervals": list(intervals), "trace": [],
        "executors": {"driver": {"tasks": 10, "task_s": 7.0}}, "python_driver_cpu_s": 1.5,
        "peak_pss_driver_mb": 200, "peak_pss_jvm_workers_mb": 2000, **extra,
    }  # fmt: skip


def _iv(i, stage_s, check_s, full=True):
    return {"interval": i, "stage_s": stage_s, "check_s": check_s, "seconds": stage_s + check_s,
            "full_interval": full}  # fmt: skip


RUNS = {
    "full": {"label": "local[2]", "tuples": 1_080_000, "play_s": 100.0, "master": "local[2]",
             "generated_s": 1.0, "commit": "abc", "date": "2026-11-24", "checksums": {"a": "1"}},
}  # fmt: skip


def test_a_stream_part_is_timed_by_its_intervals_with_checks_and_compared_with_real_time():
    # 20 full intervals and a short tail: the first tenth takes 3 s each, the last tenth 6 s
    ivs = [_iv(i, 2.0, 1.0) for i in range(2)] + [_iv(i, 3.0, 1.0) for i in range(2, 18)]
    ivs += [_iv(i, 4.0, 2.0) for i in range(18, 20)] + [_iv(20, 0.5, 0.5, full=False)]
    (row,) = summarize([_part("join", 999.0, ivs)], RUNS)
    assert row["seconds"] == 3 * 2 + 4 * 16 + 6 * 2 + 1
    assert row["x_real_time"] == round(100.0 / 83, 2)
    assert row["tuples_per_s"] == round(1_080_000 / 83)
    assert (row["first_tenth_s"], row["last_tenth_s"], row["last_vs_first"]) == (3.0, 6.0, 2.0)
    assert row["check_share"] == round((2 + 16 + 4 + 0.5) / 83, 2)
    assert (row["executor_tasks"], row["executor_task_s"], row["failed"]) == (10, 7, "")


def test_ingest_reports_rows_per_second_and_a_failed_part_keeps_its_reason():
    rows = summarize(
        [_part("ingest", 10.0, rows=1_080_000), {"run": "full", "part": "stats", "failed": "exit 1: boom"}],
        RUNS,
    )
    assert rows[0]["tuples_per_s"] == 108_000 and rows[0]["x_real_time"] == 10.0
    assert rows[1]["failed"] == "exit 1: boom" and "seconds" not in rows[1]
    text = render({"runs": RUNS, "minutes": 1.0, "quick": False}, rows)
    assert "| local[2] | ingest | abc | 10 | 108,000 | 10.00 |" in text and "exit 1: boom" in text
    # a part rerun later on the same lake names its own commit, the others the run's
    (kept, rerun) = summarize([_part("ingest", 10.0, rows=1), _part("join", 5.0, commit="def")], RUNS)
    assert (kept["commit"], rerun["commit"]) == ("abc", "def")
    assert "have not both run yet" in text


def test_runs_are_chosen_by_name(monkeypatch):
    monkeypatch.setenv("OOO_SCALE_RUNS", "tenth")
    monkeypatch.setenv("OOO_SCALE_TUPLES", "1000")
    assert _runs(quick=False) == [("tenth", "local[2], a tenth", 100)]
    monkeypatch.setenv("OOO_SCALE_RUNS", "tenth,huge")
    with pytest.raises(StateError, match="unknown run huge"):
        _runs(quick=False)


def test_a_rerun_part_removes_what_its_adaptation_and_repair_wrote():
    from outoforder.io import tables as T

    assert {T.JOIN_STATE, T.JOIN_RESULTS, T.JOIN_PARAMS} <= set(part_tables("join"))
    assert {T.AGG_RESULTS, T.AGG_LEDGER, T.AGG_REPAIRS} <= set(part_tables("aggregate"))
    assert T.TOPK_RESULTS in part_tables("topk")


def test_theta_parts_cover_the_event_time_they_ran():
    # the DAG's slices: 60 s of play each; the day's run: the whole replay in one record
    slices = [dict(_iv(i, 5.0, 1.0), covered_s=60.0) for i in range(2)]
    day = [dict(_iv(0, 40.0, 10.0, full=False), covered_s=100.0)]
    (s, d) = summarize([_part("theta", 99.0, slices), _part("theta-day", 99.0, day)], RUNS)
    assert (s["seconds"], s["x_real_time"]) == (12.0, 10.0)
    assert (d["seconds"], d["x_real_time"], d["first_tenth_s"]) == (50.0, 2.0, None)
    assert d["tuples_per_s"] == round(1_080_000 / 50)
