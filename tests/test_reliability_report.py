"""The reliability run's report: one row per stage, and hand-written notes kept with their stage."""

import json

from benchmarks import reliability


def record(stage, trial, same=True, killed=True):
    return {
        "stage": stage,
        "trial": trial,
        "reference_commits": 4,
        "commits_before_kill": trial % 4,
        "killed": killed,
        "rerun_rc": 0,
        "rerun_s": 10.0 + trial,
        "same_tables": same,
    }


def test_the_report_counts_each_stage_and_prints_its_note(tmp_path):
    records = [record("ingest", i) for i in range(3)] + [record("theta-join", 0, same=False, killed=False)]
    meta = {
        "date": "2026-11-23",
        "minutes": 1.0,
        "replay": "r",
        "trials_from_earlier_runs": 0,
        "stages_not_run": ["join-stream"],
        "notes": {"theta-join": "trial 0 was paused by hand."},
    }

    reliability._write(tmp_path, meta, records, quick=False)

    rows = {r["stage"]: r for r in reliability.summarize(records)}
    assert rows["ingest"]["identical"] == 3 and rows["ingest"]["kill_points"] == "0–2 of 4 commits"
    assert rows["theta-join"]["identical"] == 0 and rows["theta-join"]["killed"] == 0
    md = (tmp_path / "reliability.md").read_text()
    assert "**theta-join:** trial 0 was paused by hand." in md
    assert "**Not run in this run:** join-stream." in md
    assert json.loads((tmp_path / "reliability.json").read_text())["meta"]["notes"] == meta["notes"]


def test_a_rerun_stage_keeps_the_trials_it_replaces_with_their_note(tmp_path):
    old = [record("join-stream", i, same=i != 1) for i in range(3)]
    old = [{**r, "commit": "41e2d71", "date": "2026-11-22"} for r in old]
    earlier_meta = {
        "date": "2026-11-22",
        "notes": {"join-stream": "trial 1 found a bug."},
        "superseded": [{"stage": "ingest", "commit": "aaaaaaa", "date": "2026-11-21", "trials": 1,
                        "identical": 0, "note": "", "records": []}],
    }  # fmt: skip

    kept = reliability.superseded(earlier_meta, old)

    assert [k["stage"] for k in kept] == ["ingest", "join-stream"]
    assert kept[1] | {"records": None} == {
        "stage": "join-stream", "commit": "41e2d71", "date": "2026-11-22", "trials": 3, "identical": 2,
        "note": "trial 1 found a bug.", "records": None,
    }  # fmt: skip
    assert kept[1]["records"] == old
    meta = {
        "date": "2026-11-23",
        "minutes": 1.0,
        "replay": "r",
        "trials_from_earlier_runs": 0,
        "stages_not_run": [],
        "notes": {},
        "superseded": kept,
    }
    reliability._write(tmp_path, meta, [record("join-stream", 0)], quick=False)
    md = (tmp_path / "reliability.md").read_text()
    assert "- **join-stream** at commit 41e2d71 (2026-11-22): 2 of 3 identical. trial 1 found a bug." in md
