"""A synthetic soccer RTLS stream in the DEBS 2013 format, at the papers' rates.

Public in-game DEBS 2013 slices are not available (shared/data/debs2013/README.txt), so benchmarks
generate their own: one ball at 2000 Hz and 22 players with two leg sensors each at 200 Hz on a
105 m x 68 m pitch (origin at the centre, positions in mm, timestamps in picoseconds from the real
game's kick-off). Players move as mean-reverting random walks (Ornstein-Uhlenbeck velocity, top
speed ~8 m/s) around a home position; the ball is passed between random players and is kicked
at 10-30 m/s after being held for 0.5-2 s. Everything is vectorised per sensor and seeded.

Sensor ids: the DEBS ids for the ball (4) and the 16 listed players (metadata.txt); three extra
players per team get ids 201-206 (team A) and 211-216 (team B).
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from outoforder.sources.sensors import SYNTHETIC_STREAMS, TEAM_A_PLAYERS, TEAM_B_PLAYERS

KICKOFF_PS = 10_753_295_594_424_116
PS_PER_S = 10**12
HALF_LENGTH_MM, HALF_WIDTH_MM = 52_500, 34_000
PITCH_M = np.array([HALF_LENGTH_MM / 1000.0, HALF_WIDTH_MM / 1000.0])


@dataclass(frozen=True)
class SoccerConfig:
    """What to generate."""

    seconds: float = 10.0
    ball_hz: int = 2000
    player_hz: int = 200
    seed: int = 0
    start_ps: int = KICKOFF_PS


@dataclass(frozen=True)
class SoccerStream:
    """Generated rows in event-time order (ties: by sensor id), columnar."""

    sid: npt.NDArray[np.int64]
    ts_ps: npt.NDArray[np.int64]
    xyz_mm: npt.NDArray[np.int64]  # (n, 3)
    speed_um_s: npt.NDArray[np.int64]
    accel_um_s2: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.sid.size)

    def stream_of(self) -> list[str]:
        """The stream (ball / team_a / team_b) of every row."""
        return [SYNTHETIC_STREAMS[int(s)] for s in self.sid]

    def lines(
        self, order: npt.NDArray[np.int64] | None = None, arrival_ps: npt.NDArray[np.int64] | None = None
    ) -> list[str]:
        """DEBS 2013 CSV lines, optionally in a given (arrival) order with an arrival column."""
        idx = np.arange(len(self)) if order is None else order
        out = []
        for i in idx:
            x, y, z = self.xyz_mm[i]
            base = (
                f"{self.sid[i]},{self.ts_ps[i]},{x},{y},{z},{self.speed_um_s[i]},"
                f"{self.accel_um_s2[i]},0,0,0,0,0,0"
            )
            out.append(base if arrival_ps is None else f"{base},{arrival_ps[i]}")
        return out

    def csv(
        self, order: npt.NDArray[np.int64] | None = None, arrival_ps: npt.NDArray[np.int64] | None = None
    ) -> bytes:
        """The text of :meth:`lines` (one line each, newline-terminated), written by Arrow in C++.

        The same bytes as joining the lines with newlines (and one at the end), about three times
        faster and without a Python string per row: replays of tens of millions of rows are written this way.
        """
        import pyarrow as pa
        import pyarrow.csv as pacsv

        idx = np.arange(len(self)) if order is None else order
        zero = pa.array(np.zeros(idx.size, dtype=np.int64))
        columns = [
            self.sid[idx], self.ts_ps[idx], self.xyz_mm[idx, 0], self.xyz_mm[idx, 1], self.xyz_mm[idx, 2],
            self.speed_um_s[idx], self.accel_um_s2[idx],
        ]  # fmt: skip
        arrays = [pa.array(np.ascontiguousarray(c)) for c in columns] + [zero] * 6
        if arrival_ps is not None:
            arrays.append(pa.array(np.ascontiguousarray(arrival_ps[idx])))
        table = pa.Table.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False, quoting_style="none"))
        return bytes(sink.getvalue())


def _track(
    rng: np.random.Generator, n: int, hz: int, home: npt.NDArray[np.float64], speed_scale: float
) -> npt.NDArray[np.float64]:
    """Positions (m) of one mover: OU velocity integrated, pulled back to ``home``."""
    dt = 1.0 / hz
    theta, sigma = 0.5, speed_scale
    noise = rng.normal(0.0, sigma * np.sqrt(dt), (n, 2))
    decay = np.exp(-theta * dt)
    # v[t] = decay * v[t-1] + noise[t], solved chunk by chunk with a scaled cumulative sum
    # (chunks keep decay**-k far from overflow on long streams).
    v = np.empty_like(noise)
    carry = np.zeros(2)
    chunk = 2048
    for start in range(0, n, chunk):
        part = noise[start : start + chunk]
        powers = decay ** np.arange(1, part.shape[0] + 1)
        v[start : start + chunk] = (carry + np.cumsum(part / powers[:, None], axis=0)) * powers[:, None]
        carry = v[start + part.shape[0] - 1] * 1.0
    pos = home + np.cumsum(v * dt, axis=0)
    # keep players near home and on the pitch
    pos = home + np.tanh((pos - home) / 15.0) * 15.0
    return np.clip(pos, -PITCH_M, PITCH_M)


def generate_soccer(cfg: SoccerConfig) -> SoccerStream:
    """Generate ``cfg.seconds`` of play; rows sorted by event time."""
    rng = np.random.default_rng(cfg.seed)
    parts: list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
    players = [(p, -1.0) for p in TEAM_A_PLAYERS] + [(p, 1.0) for p in TEAM_B_PLAYERS]
    n_p = int(cfg.seconds * cfg.player_hz)
    player_tracks = []
    for (left, right), side in players:
        home = np.array([side * rng.uniform(5, 45), rng.uniform(-30, 30)])
        track = _track(rng, n_p, cfg.player_hz, home, speed_scale=3.0)
        player_tracks.append(track)
        for sid, offset in ((left, -0.1), (right, 0.1)):
            phase = int(rng.integers(0, PS_PER_S // cfg.player_hz))
            ts = cfg.start_ps + phase + np.arange(n_p, dtype=np.int64) * (PS_PER_S // cfg.player_hz)
            parts.append((sid, ts, np.clip(track + np.array([0.0, offset]), -PITCH_M, PITCH_M)))
    # Ball: held for 0.5-2 s, then passed to another player at 10-30 m/s.
    n_b = int(cfg.seconds * cfg.ball_hz)
    ball = np.empty((n_b, 2))
    t, holder = 0.0, int(rng.integers(0, len(player_tracks)))
    a = player_tracks[holder][0]
    while t < cfg.seconds:
        target = int(rng.integers(0, len(player_tracks)))
        b = player_tracks[target][min(int(t * cfg.player_hz), n_p - 1)]
        hold = float(rng.uniform(0.5, 2.0))
        i0, i1 = int(t * cfg.ball_hz), min(n_b, int((t + hold) * cfg.ball_hz))
        ball[i0:i1] = a  # at the holder's feet
        t += hold
        dur = max(0.2, float(np.linalg.norm(b - a)) / float(rng.uniform(10.0, 30.0)))
        i0, i1 = int(t * cfg.ball_hz), min(n_b, int((t + dur) * cfg.ball_hz))
        frac = np.linspace(0.0, 1.0, max(i1 - i0, 1))[:, None]
        ball[i0:i1] = a + (b - a) * frac[: i1 - i0]
        t, holder, a = t + dur, target, b  # the ball continues from where it landed
    ts_b = cfg.start_ps + np.arange(n_b, dtype=np.int64) * (PS_PER_S // cfg.ball_hz)
    parts.append((4, ts_b, ball))

    sensor = np.concatenate([np.full(p[1].size, p[0], dtype=np.int64) for p in parts])
    ts = np.concatenate([p[1] for p in parts])
    pos = np.concatenate([p[2] for p in parts])
    order = np.lexsort((sensor, ts))
    sensor, ts, pos = sensor[order], ts[order], pos[order]
    # speed and acceleration from finite differences per sensor (sorted by sensor then time)
    by_sensor = np.lexsort((ts, sensor))
    p_s, t_s, s_s = pos[by_sensor], ts[by_sensor], sensor[by_sensor]
    dt = np.diff(t_s, prepend=t_s[0]) / PS_PER_S
    step = np.linalg.norm(np.diff(p_s, axis=0, prepend=p_s[:1]), axis=1)
    same = np.concatenate([[False], s_s[1:] == s_s[:-1]])
    speed_sorted = np.where(same & (dt > 0), step / np.where(dt > 0, dt, 1.0), 0.0)
    dv = np.abs(np.diff(speed_sorted, prepend=speed_sorted[:1]))
    accel_sorted = np.where(same & (dt > 0), dv / np.where(dt > 0, dt, 1.0), 0.0)
    speed = np.empty_like(speed_sorted)
    speed[by_sensor] = speed_sorted
    accel = np.empty_like(accel_sorted)
    accel[by_sensor] = accel_sorted
    z = np.where(sensor == 4, 110, 0)
    xyz = np.column_stack([np.rint(pos * 1000.0).astype(np.int64), z.astype(np.int64)])
    return SoccerStream(
        sensor, ts, xyz, np.rint(speed * 1e6).astype(np.int64), np.rint(accel * 1e6).astype(np.int64)
    )


def write_debs2013(path: Path, lines: list[str] | bytes) -> Path:
    """Write lines (or their text, from :meth:`SoccerStream.csv`) as a gzip DEBS 2013 file.

    The format :class:`Debs2013Reader` reads.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    # mtime=0 and no file name in the header: the same lines give the same bytes, hence the same
    # content hash, so re-generating a replay and ingesting it again is a no-op.
    with (
        tmp.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=3) as fh,
    ):
        fh.write(lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode("utf-8"))
    tmp.replace(path)
    return path
