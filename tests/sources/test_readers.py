"""Every reader against the statistics in the data READMEs, and against disorder_stats.py itself."""

import importlib.util
import json

import numpy as np
import pytest

from outoforder.core.disorder import disorder_stats, disorder_stats_by
from outoforder.sources.catalog import BUILTIN
from outoforder.sources.declared import make_reader
from outoforder.sources.parsing import read_file


def read_all(path, reader_name, **kw):
    batches = list(read_file(path, make_reader(reader_name), **kw))
    rows = [r for b in batches for r in b.accepted.to_pylist()]
    rejects = [r for b in batches for r in b.quarantined.to_pylist()]
    return rows, rejects, batches[-1].counts


def oracle(data_dir, kind, path):
    spec = importlib.util.spec_from_file_location("disorder_stats", data_dir / "disorder_stats.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, kind)(str(path))


# (file, rows, late, max delay s) straight from the READMEs
README_FIGURES = {
    "ooo/d-1": (9600, 1544, 4.544),
    "ooo/d-2": (10800, 3666, 3.457),
    "ooo/d-3": (9600, 3277, 5.449),
    "ooo/d-4": (8400, 2302, 2.910),
    "ooo/d-5": (8400, 1584, 1.415),
    "debs2015/first10004": (10004, 9850, 2760.0),
    "debs2013/fullgame_head1000": (1000, 0, 0.0),
    "debs2013/mini_soccer": (50000, 0, 0.0),
    "debs2013/socstream_kickoff": (2067, 0, 0.0),
}


@pytest.mark.parametrize("dataset", BUILTIN, ids=lambda d: d.source)
def test_reader_reproduces_the_readme_figures(dataset, data_dir):
    rows, rejects, counts = read_all(dataset.path(data_dir), dataset.reader)
    assert rejects == []
    assert counts.accepted == len(rows) == counts.rows_read
    ts = [r["event_ts"] for r in rows]
    s = disorder_stats(ts).as_report()
    n, late, max_delay = README_FIGURES[dataset.source]
    assert (s["rows"], s["late"]) == (n, late)
    assert s["max_delay"] == pytest.approx(max_delay, abs=1e-6)


@pytest.mark.parametrize("dataset", BUILTIN, ids=lambda d: d.source)
def test_reader_matches_disorder_stats_py_overall_and_per_source(dataset, data_dir):
    kind = dataset.reader
    expected = oracle(data_dir, kind, dataset.path(data_dir))
    rows, _, _ = read_all(dataset.path(data_dir), dataset.reader)
    ts = np.array([r["event_ts"] for r in rows])
    keys = np.array([r["key"] for r in rows])
    got = disorder_stats(ts).as_report()
    for field in ("rows", "late", "late_frac"):
        assert got[field] == expected["overall"][field], field
    for field in ("max_delay", "mean_delay_late", "mean_delay_all", "span"):
        assert got[field] == pytest.approx(expected["overall"][field], abs=2e-6), field
    per_key = {k: v.as_report() for k, v in disorder_stats_by(ts, keys).items()}
    assert set(per_key) == {str(k) for k in expected["per_source"]}
    for key, exp in expected["per_source"].items():
        assert per_key[str(key)]["late"] == exp["late"]
        assert per_key[str(key)]["max_delay"] == pytest.approx(exp["max_delay"], abs=2e-6)


def test_stored_readme_json_agrees_for_ooo_d1(data_dir):
    stored = json.loads((data_dir / "ooo-dataset" / "stats_d-1.json").read_text())
    rows, _, _ = read_all(data_dir / "ooo-dataset" / "d-1.csv.gz", "ooo")
    got = disorder_stats([r["event_ts"] for r in rows]).as_report()
    assert got["late"] == stored["overall"]["late"] == 1544
    assert got["mean_delay_late"] == pytest.approx(stored["overall"]["mean_delay_late"], abs=1e-9)


def test_debs2013_rows_are_mapped_to_streams_and_units(data_dir):
    rows, _, _ = read_all(data_dir / "debs2013" / "mini_soccer_50k_sid8_13_61.csv.gz", "debs2013")
    streams = {}
    for r in rows:
        streams[r["key"]] = r["stream"]
    assert streams == {"8": "ball", "13": "team_a", "61": "team_b"}
    first = rows[0]  # 61,10634757171903878,27058,-130,-110,178392,...
    assert first["event_ts"] == 10634757171903878 // 10**6
    assert first["x"] == pytest.approx(27.058)
    assert first["value"] == pytest.approx(0.178392)
    assert first["arrival_ts"] is None
    assert sum(1 for r in rows if r["key"] == "8") == 41_551


def test_ooo_rows_carry_receive_time_and_device(data_dir):
    rows, _, _ = read_all(data_dir / "ooo-dataset" / "d-1.csv.gz", "ooo")
    first = rows[0]
    assert first["key"] == "dev_15"
    assert first["event_ts"] == 1415624019862 * 1000
    assert first["arrival_ts"] == 1415624021690 * 1000
    assert first["value"] == 264.0
    arrivals = [r["arrival_ts"] for r in rows]
    assert arrivals == sorted(arrivals)  # file order is receive order


def test_debs2015_rows_use_pickup_as_event_and_dropoff_as_arrival(data_dir):
    rows, _, _ = read_all(data_dir / "debs2015" / "sorted_data_first10004.csv.gz", "debs2015")
    second = rows[1]  # ...,2013-01-01 00:02:00,2013-01-01 00:02:00,0,0.00,0.000000,...,27.00
    assert second["event_ts"] == second["arrival_ts"]
    assert second["x"] is None and second["y"] is None  # 0.0 = missing
    assert second["value"] == 27.0
    assert len({r["key"] for r in rows}) == 4630
