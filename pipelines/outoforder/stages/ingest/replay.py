"""Make an injected-disorder replay: synthetic soccer play, delayed by a named model.

The file is in the DEBS 2013 format in *arrival* order with a 14th column (arrival time, ps), so
it goes through the same reader and ingest path as real data. :func:`make_replay` writes one gzip
file (the main job's replay); :func:`write_replay_parts` writes a long replay (the DEBS 2013 full
game's size) as plain CSV parts without ever holding it whole in memory.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.errors import ConfigError
from outoforder.sources.disorder import inject
from outoforder.sources.synthetic import (
    KICKOFF_PS,
    PS_PER_S,
    SoccerConfig,
    SoccerStream,
    generate_soccer,
    write_debs2013,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replay:
    """The written file, its source id and the injector's report."""

    path: Path
    source: str
    report: dict[str, Any]


def soccer_config(seconds: float, seed: int, rate: float = 1.0, **more: Any) -> SoccerConfig:
    """The generator's settings at ``rate`` times the papers' sensor rates (ball 2000 Hz, legs 200 Hz).

    >>> c = soccer_config(5, 1, rate=0.1)
    >>> (c.ball_hz, c.player_hz)
    (200, 20)
    """
    if not 0 < rate <= 1:
        msg = f"the rate scale must be in (0, 1], got {rate}"
        raise ConfigError(msg)
    base = SoccerConfig()
    return SoccerConfig(
        seconds=seconds, seed=seed, ball_hz=max(1, round(base.ball_hz * rate)),
        player_hz=max(1, round(base.player_hz * rate)), **more,
    )  # fmt: skip


def make_replay(landing: Path, model: str, seconds: float, seed: int, rate: float = 1.0) -> Replay:
    """Generate ``seconds`` of play, inject ``model`` with ``seed``, write it under ``landing``."""
    play = generate_soccer(soccer_config(seconds, seed, rate))
    event_us = play.ts_ps // 1_000_000
    injection = inject(event_us, model, seed, streams=play.stream_of())
    # arrival in ps, keeping the sub-µs digits of the event time
    arrival_ps = play.ts_ps + (injection.arrival_us - event_us) * 1_000_000
    name = _name(model)
    path = landing / f"soccer_{name}_{seconds:g}s_seed{seed}{_rate_suffix(rate)}.csv.gz"
    write_debs2013(path, play.csv(injection.order, arrival_ps))
    report = injection.report()
    report["per_stream"] = {k: v.as_report() for k, v in injection.per_stream.items()}
    report["tuples"] = len(play)
    report["expected_max_delay_at_this_size"] = round(
        _expected_max(model, int(np.count_nonzero(injection.arrival_us - event_us))), 3
    )
    return Replay(path, replay_source(model, seconds, seed, rate), report)


@dataclass(frozen=True)
class ReplayParts:
    """A replay written as parts: their paths in arrival order, the source id, the totals."""

    paths: tuple[Path, ...]
    source: str
    tuples: int
    report: dict[str, Any]


def write_replay_parts(
    folder: Path, model: str, seconds: float, seed: int, part_s: float = 60.0, rate: float = 1.0
) -> ReplayParts:
    """``seconds`` of play delayed by ``model``, as plain CSV parts of ``part_s`` of arrival time each.

    Play is generated ``part_s`` seconds at a time, each piece with its own seed (``seed`` and the
    piece's number) and delayed by the model on its own. Every tuple goes to the part of its arrival
    time: a tuple of piece ``c`` that arrives after the piece's end is carried into part ``c + 1``
    (no tuple of a later piece can arrive before its own event time). Read one after the other, the
    parts are one stream in arrival order, ties in generation order. Memory holds one piece and
    its carry, whatever ``seconds`` is. Players take new home positions at every piece's start: the
    play is for throughput, not for analytics across pieces.

    Parts are plain text so that ingest can split them into byte ranges. A folder that holds the
    same replay already (its ``replay.json`` lists the same parameters) is reused as it is.
    """
    if part_s <= 0 or seconds <= 0:
        msg = f"seconds and part_s must be positive, got {seconds} and {part_s}"
        raise ConfigError(msg)
    params = {"model": model, "seconds": seconds, "seed": seed, "part_s": part_s}
    if rate != 1.0:
        params["rate"] = rate
    manifest = folder / "replay.json"
    source = f"{replay_source(model, seconds, seed, rate)}-parts{part_s:g}s"
    if manifest.exists():
        got = json.loads(manifest.read_text())
        paths = tuple(folder / n for n in got["parts"])
        if got["params"] == params and all(p.exists() for p in paths):
            return ReplayParts(paths, source, int(got["report"]["tuples"]), got["report"])
    folder.mkdir(parents=True, exist_ok=True)
    pieces = -(-round(seconds * 1000) // round(part_s * 1000))
    carry: tuple[SoccerStream, npt.NDArray[np.int64]] | None = None
    paths_out: list[Path] = []
    tuples = late = max_delay_us = 0
    for c in range(pieces):
        length = min(part_s, seconds - c * part_s)
        start_ps = KICKOFF_PS + round(c * part_s * PS_PER_S)
        play = generate_soccer(soccer_config(length, seed * 100_003 + c, rate, start_ps=start_ps))
        event_us = play.ts_ps // 1_000_000
        injection = inject(event_us, model, seed * 100_003 + c)
        arrival_ps = play.ts_ps + (injection.arrival_us - event_us) * 1_000_000
        tuples += len(play)
        late += injection.achieved.late
        max_delay_us = max(max_delay_us, injection.achieved.max_delay_us)
        if carry is not None:
            play, arrival_ps = _concat(carry[0], play), np.concatenate([carry[1], arrival_ps])
        # stable by arrival: the carry (generated earlier) first among equal arrival times
        order = np.argsort(arrival_ps, kind="stable")
        end_ps = start_ps + round(length * PS_PER_S)
        cut = len(play) if c == pieces - 1 else int(np.searchsorted(arrival_ps[order], end_ps))
        path = folder / f"part-{c:05d}.csv"
        tmp = path.with_suffix(".csv.tmp")
        tmp.write_bytes(play.csv(order[:cut], arrival_ps))
        tmp.replace(path)
        paths_out.append(path)
        rest = np.sort(order[cut:])  # generation order, so that ties keep it in the next part
        carry = (_take(play, rest), arrival_ps[rest]) if rest.size else None
        if c % 10 == 0 or c == pieces - 1:
            log.info("[replay] part %d/%d written: %s tuples so far", c + 1, pieces, f"{tuples:,}")
    report = {
        "model": model,
        "seed": seed,
        "tuples": tuples,
        "parts": pieces,
        "part_s": part_s,
        "late_frac_within_parts": round(late / max(tuples, 1), 6),
        "max_delay_s": max_delay_us / 1e6,
    }
    manifest.write_text(
        json.dumps({"params": params, "parts": [p.name for p in paths_out], "report": report}, indent=1)
    )
    return ReplayParts(tuple(paths_out), source, tuples, report)


def _take(s: SoccerStream, idx: npt.NDArray[np.int64]) -> SoccerStream:
    return SoccerStream(s.sid[idx], s.ts_ps[idx], s.xyz_mm[idx], s.speed_um_s[idx], s.accel_um_s2[idx])


def _concat(a: SoccerStream, b: SoccerStream) -> SoccerStream:
    return SoccerStream(
        np.concatenate([a.sid, b.sid]),
        np.concatenate([a.ts_ps, b.ts_ps]),
        np.concatenate([a.xyz_mm, b.xyz_mm]),
        np.concatenate([a.speed_um_s, b.speed_um_s]),
        np.concatenate([a.accel_um_s2, b.accel_um_s2]),
    )


def _name(model: str) -> str:
    return model.replace(":", "_").replace(",", "_").replace("=", "")


def _rate_suffix(rate: float) -> str:
    return "" if rate == 1.0 else f"-r{rate:g}"


def replay_source(model: str, seconds: float, seed: int, rate: float = 1.0) -> str:
    """The bronze source id of a replay (without generating it).

    >>> replay_source("hpm_game1", 20.0, 7), replay_source("hpm_game1", 60.0, 7, rate=0.1)
    ('synthetic/hpm_game1-20s-seed7', 'synthetic/hpm_game1-60s-seed7-r0.1')
    """
    return f"synthetic/{_name(model)}-{seconds:g}s-seed{seed}{_rate_suffix(rate)}"


def _expected_max(model: str, n_late: int) -> float:
    from outoforder.sources.disorder import parse_model

    return parse_model(model).expected_max_s(max(n_late, 1))


def format_report(r: dict[str, Any]) -> str:
    """Target vs achieved disorder, one line each."""
    a = r["achieved"]
    lines = [f"[inject] model {r['model']} seed {r['seed']}: {r['tuples']:,} tuples"]
    lines.append(
        f"[inject]   achieved: late {100 * a['late_frac']:.2f}%  mean delay (late) "
        f"{1000 * a['mean_delay_late']:.1f} ms  max delay {a['max_delay']:.3f} s "
        f"(model's typical max at this size: {r['expected_max_delay_at_this_size']} s)"
    )
    if "target" in r:
        t = r["target"]
        lines.append(
            f"[inject]   target  : late {100 * t['late_frac']:.2f}%  mean delay (late) "
            f"{1000 * t['mean_delay_late']:.1f} ms  max delay {t['max_delay']:.3f} s "
            f"(over {t['at_tuples']:,} tuples)"
        )
    return "\n".join(lines)
