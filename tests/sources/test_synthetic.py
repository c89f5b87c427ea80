import numpy as np

from outoforder.sources.declared import make_reader
from outoforder.sources.parsing import read_file
from outoforder.sources.synthetic import (
    HALF_LENGTH_MM,
    HALF_WIDTH_MM,
    KICKOFF_PS,
    PS_PER_S,
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


def test_arrow_text_equals_the_per_line_text():
    s = generate_soccer(SoccerConfig(seconds=0.5, seed=6))
    order = np.random.default_rng(6).permutation(len(s)).astype(np.int64)
    arrival = s.ts_ps + 1234
    assert s.csv(order, arrival) == ("\n".join(s.lines(order, arrival)) + "\n").encode()
    assert s.csv() == ("\n".join(s.lines()) + "\n").encode()


def test_replay_parts_are_one_arrival_ordered_stream_of_every_generated_tuple(tmp_path):
    from outoforder.stages.ingest.replay import write_replay_parts

    r = write_replay_parts(tmp_path, "hpm_game1", 5.5, 3, part_s=2.0)
    rows = np.concatenate([np.loadtxt(p, delimiter=",", dtype=np.int64, ndmin=2) for p in r.paths])
    assert len(r.paths) == 3 and rows.shape == (r.tuples, 14)
    assert (np.diff(rows[:, 13]) >= 0).all()  # arrival order across part boundaries
    assert (rows[:, 13] >= rows[:, 1]).all()
    # every piece's play, each tuple once; some arrive in the next part (the carry)
    pieces = [
        generate_soccer(SoccerConfig(seconds=sec, seed=3 * 100_003 + c, start_ps=s0))
        for c, (sec, s0) in enumerate(
            [(2.0, KICKOFF_PS), (2.0, KICKOFF_PS + 2 * PS_PER_S), (1.5, KICKOFF_PS + 4 * PS_PER_S)]
        )
    ]
    want = np.concatenate([np.column_stack([p.ts_ps, p.sid]) for p in pieces])
    got = rows[:, [1, 0]]
    assert np.array_equal(got[np.lexsort(got.T[::-1])], want[np.lexsort(want.T[::-1])])
    first = np.loadtxt(r.paths[0], delimiter=",", dtype=np.int64, ndmin=2)
    assert (first[:, 13] < KICKOFF_PS + 2 * PS_PER_S).all() and len(first) < len(pieces[0])
    assert write_replay_parts(tmp_path, "hpm_game1", 5.5, 3, part_s=2.0).paths == r.paths  # reused
