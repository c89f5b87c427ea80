"""Make an injected-disorder replay file: synthetic soccer play, delayed by a named model.

The file is in the DEBS 2013 format in *arrival* order with a 14th column (arrival time, ps), so
it goes through the same reader and ingest path as real data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from outoforder.sources.disorder import inject
from outoforder.sources.synthetic import SoccerConfig, generate_soccer, write_debs2013


@dataclass(frozen=True)
class Replay:
    """The written file, its source id and the injector's report."""

    path: Path
    source: str
    report: dict[str, Any]


def make_replay(landing: Path, model: str, seconds: float, seed: int) -> Replay:
    """Generate ``seconds`` of play, inject ``model`` with ``seed``, write it under ``landing``."""
    play = generate_soccer(SoccerConfig(seconds=seconds, seed=seed))
    event_us = play.ts_ps // 1_000_000
    injection = inject(event_us, model, seed, streams=play.stream_of())
    # arrival in ps, keeping the sub-µs digits of the event time
    arrival_ps = play.ts_ps + (injection.arrival_us - event_us) * 1_000_000
    name = _name(model)
    path = landing / f"soccer_{name}_{seconds:g}s_seed{seed}.csv.gz"
    write_debs2013(path, play.lines(injection.order, arrival_ps))
    report = injection.report()
    report["per_stream"] = {k: v.as_report() for k, v in injection.per_stream.items()}
    report["tuples"] = len(play)
    report["expected_max_delay_at_this_size"] = round(
        _expected_max(model, int(np.count_nonzero(injection.arrival_us - event_us))), 3
    )
    return Replay(path, replay_source(model, seconds, seed), report)


def _name(model: str) -> str:
    return model.replace(":", "_").replace(",", "_").replace("=", "")


def replay_source(model: str, seconds: float, seed: int) -> str:
    """The bronze source id of a replay (without generating it).

    >>> replay_source("hpm_game1", 20.0, 7)
    'synthetic/hpm_game1-20s-seed7'
    """
    return f"synthetic/{_name(model)}-{seconds:g}s-seed{seed}"


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
