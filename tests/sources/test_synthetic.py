import numpy as np

from outoforder.sources.readers import make_reader, read_file
from outoforder.sources.synthetic import (
    HALF_LENGTH_MM,
    HALF_WIDTH_MM,
    SYNTHETIC_STREAMS,
    SoccerConfig,
    generate_soccer,
    write_debs2013,
)


def test_rates_match_the_papers_setup():
    s = generate_soccer(SoccerConfig(seconds=2.0, seed=1))
    sids, counts = np.unique(s.sid, return_counts=True)
    per = dict(zip(sids.tolist(), counts.tolist(), strict=True))
    assert per.pop(4) == 4000  # ball, 2000 Hz
    assert len(per) == 44  # 22 players x 2 legs
    assert set(per.values()) == {400}  # 200 Hz
    assert (np.diff(s.ts_ps) >= 0).all()


def test_positions_stay_on_the_pitch_and_speeds_are_plausible():
    s = generate_soccer(SoccerConfig(seconds=30.0, seed=2))
    assert (np.abs(s.xyz_mm[:, 0]) <= HALF_LENGTH_MM).all()
    assert (np.abs(s.xyz_mm[:, 1]) <= HALF_WIDTH_MM).all()
    players = s.sid != 4
    assert np.median(s.speed_um_s[players]) / 1e6 < 12.0


def test_generator_is_seeded():
    a = generate_soccer(SoccerConfig(seconds=1.0, seed=3))
    b = generate_soccer(SoccerConfig(seconds=1.0, seed=3))
    assert np.array_equal(a.xyz_mm, b.xyz_mm) and np.array_equal(a.ts_ps, b.ts_ps)


def test_written_file_reads_back_with_all_streams(tmp_path):
    s = generate_soccer(SoccerConfig(seconds=1.0, seed=4))
    path = write_debs2013(tmp_path / "play.csv.gz", s.lines())
    batches = list(read_file(path, make_reader("soccer_synthetic")))
    acc = [r for b in batches for r in b.accepted.to_pylist()]
    assert len(acc) == len(s)
    assert {r["stream"] for r in acc} == {"ball", "team_a", "team_b"}
    assert all(SYNTHETIC_STREAMS[int(r["key"])] == r["stream"] for r in acc[:100])


def test_writing_the_same_play_twice_gives_identical_bytes(tmp_path):
    s = generate_soccer(SoccerConfig(seconds=0.5, seed=5))
    a = write_debs2013(tmp_path / "a.csv.gz", s.lines()).read_bytes()
    b = write_debs2013(tmp_path / "b.csv.gz", s.lines()).read_bytes()
    assert a == b
