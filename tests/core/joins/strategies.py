"""Seeded out-of-order two-stream inputs for the join tests."""

import numpy as np

from outoforder.core.joins.query import JoinInput
from outoforder.sources.disorder import inject, parse_model

MODELS = [
    "exponential:mean=0.00002,late_prob=0.5",
    "pareto:xm=0.000005,alpha=1.2,late_prob=0.3",
    "lognormal:mu=-11,sigma=1.5,late_prob=0.8",
    "bursty:calm_mean=0.000002,calm_late_prob=0.1,burst_xm=0.00001,burst_alpha=1.1,"
    "burst_late_prob=0.9,calm_tuples=20,burst_tuples=5",
]


def assert_same_run(got, ref) -> None:
    """Two JoinRuns agree on every output: pairs, emission points, buffers, latency, late flags."""
    for field in ("pairs", "emitted_at", "buffered", "latency", "late"):
        assert getattr(got, field).tolist() == getattr(ref, field).tolist(), field


def make_input(
    seed: int, n: int, model: str, span_us: int = 400, grid: float = 6.0, keys: int = 4
) -> JoinInput:
    """n tuples over ``span_us`` of event time, positions on a small grid so that pairs match,
    delayed by ``model`` (delays in seconds; the models above are sized for µs-scale spans)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, span_us, n)).astype(np.int64)
    side = rng.integers(0, 2, n).astype(np.int64)
    x = rng.integers(0, int(grid), n).astype(np.float64)
    y = rng.integers(0, int(grid), n).astype(np.float64)
    key = rng.integers(0, keys, n).astype(np.int64)
    order = inject(ts, parse_model(model), seed).order
    return JoinInput(side[order], ts[order], x[order], y[order], key[order])
