"""The seeded disorder injector and its presets calibrated to the papers' datasets.

:func:`inject` turns a stream in event-time order into an arrival sequence with a named delay
model and reports the disorder it achieved next to the preset's target, measured with the same
definitions as the data READMEs (:mod:`outoforder.core.disorder`).

Presets (the papers' dataset figures, papers cited in docs/operators.md; "mean" is the mean delay of
late tuples, as the papers define delay only for late tuples):

========== ============ ======= ========= ========== ======================================
preset     tuples/s     late    mean      max        source
========== ============ ======= ========= ========== ======================================
qjoin_d1   8,514        83.41 % 34.133 ms 142.147 s  QJoin Table 1, D1 (7,122,060 tuples)
qjoin_d2   10,037       86.84 % 29.597 ms 170.959 s  QJoin Table 1, D2 (4,022,600 tuples)
hpm_game1  10,800 (*)   57.58 % 34 ms     14.2 s     HPM Table 1, Game 1 (544,223 tuples)
hpm_game2  10,800 (*)   66.82 % 64 ms     17.1 s     HPM Table 1, Game 2 (559,211 tuples)
topk_*     10,800 (*)   exponential delays; levels chosen by us (the paper gives none)
regime_*   10,800 (*)   calm / congested / outage regimes in event time (our choice)
========== ============ ======= ========= ========== ======================================

(*) the rate of the synthetic soccer generator (ball 2000 Hz + 44 leg sensors at 200 Hz); the HPM
and top-k papers do not state one. LogNormal presets are fitted so that the mean of late delays
and the typical maximum over the paper's number of late tuples both match (two equations, two
parameters). The DEBS presets are a lognormal body calibrated by simulation to the late
fraction and mean (:func:`calibrate_body`) plus a rare Pareto tail sized to the maximum. On a
replay shorter than the paper's, the measured maximum is smaller: a delay cannot exceed the replay's
span, and fewer tail draws happen; :meth:`Injection.report` states the model's expected maximum for
the actual number of tuples next to the achieved one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from outoforder.core.delay_models import BodyTail, Bursty, Empirical, Exponential, LogNormal, Pareto
from outoforder.core.delay_regimes import AnyDelayModel, Regime, RegimeShift, SenderSkew, draw
from outoforder.core.disorder import DisorderStats, disorder_stats
from outoforder.core.time import US_PER_SECOND
from outoforder.errors import ConfigError

IntArray = npt.NDArray[np.int64]
MAX_DELAY_S = 365 * 24 * 3600.0  # a year: far beyond any real disorder, far below int64 µs


GAME_RATE_PER_S = 10_800.0  # the soccer game's sensors together (the seeds' DEBS 2013 rate)


@dataclass(frozen=True)
class Target:
    """The disorder a preset aims at (from the paper)."""

    late_frac: float
    mean_delay_late_s: float
    max_delay_s: float
    tuples: int
    rate_per_s: float


@dataclass(frozen=True)
class Preset:
    """A named delay model with the figures it was calibrated to."""

    name: str
    description: str
    model: AnyDelayModel
    target: Target | None = None


# Body parameters found by :func:`calibrate_body` (a grid search simulated at the preset's rate;
# re-run with ``python -m outoforder.stages presets --calibrate``): lognormal (mu, sigma) of the
# delayed tuples and the share of tuples delayed, matching the late fraction and the mean delay of
# late tuples. A rare Pareto tail (share TAIL_SHARE of delayed tuples, starting at the body's
# 99.9th percentile) is then sized so that the typical maximum over the paper's number of late
# tuples is the paper's maximum delay.
_BODIES: dict[str, tuple[float, float, float]] = {
    "qjoin_d1": (-3.76124, 0.9, 0.83413),
    "qjoin_d2": (-3.81495, 0.8, 0.86836),
    "hpm_game1": (-4.21777, 1.3, 0.57588),
    "hpm_game2": (-3.23616, 1.0, 0.6682),
}
TAIL_SHARE = 1e-4


def _measure(model: AnyDelayModel, rate_per_s: float, n: int, seed: int) -> DisorderStats:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, int(n / rate_per_s * US_PER_SECOND), n))
    delay = np.rint(model.sample(rng, n) * US_PER_SECOND).astype(np.int64)
    order = np.lexsort((np.arange(n), ts + delay))
    return disorder_stats(ts[order])


def calibrate_body(target: Target, n: int = 100_000, seed: int = 3) -> tuple[float, float, float]:
    """Search lognormal (mu, sigma) and the delayed share that reproduce late fraction and mean.

    Whether a delayed tuple is *late* depends on how many tuples overtake it, so the mapping from
    parameters to the measured late fraction is found by simulation at the target's rate: for
    each (sigma, share) on a grid, mu is corrected three times towards the target mean; the pair
    with the smallest squared relative error wins. Takes about a minute per preset.
    """
    best: tuple[float, float, float, float] | None = None
    for sigma in np.arange(0.2, 2.61, 0.1):
        for share in np.linspace(target.late_frac, 1.0, 9):
            mu = math.log(target.mean_delay_late_s) - sigma**2 / 2
            for _ in range(3):
                got = _measure(LogNormal(mu, float(sigma), float(share)), target.rate_per_s, n, seed)
                mu += math.log(target.mean_delay_late_s * US_PER_SECOND / got.mean_delay_late_us)
            got = _measure(LogNormal(mu, float(sigma), float(share)), target.rate_per_s, n, seed)
            err = ((got.late_frac - target.late_frac) / target.late_frac) ** 2 + (
                (got.mean_delay_late_us / US_PER_SECOND - target.mean_delay_late_s) / target.mean_delay_late_s
            ) ** 2
            if best is None or err < best[0]:
                best = (err, mu, float(sigma), float(share))
    if best is None:  # the grids above are never empty
        msg = "the calibration grid is empty"
        raise ConfigError(msg)
    return round(best[1], 5), round(best[2], 5), round(best[3], 5)


def _body_tail_preset(name: str, description: str, target: Target) -> Preset:
    mu, sigma, share = _BODIES[name]
    body = LogNormal(mu, sigma, 1.0)
    xm = math.exp(mu + NormalDist().inv_cdf(0.999) * sigma)
    n_tail = max(1, round(target.tuples * target.late_frac * TAIL_SHARE))
    alpha = -math.log(1.0 - 0.5 ** (1.0 / n_tail)) / math.log(target.max_delay_s / xm)
    model = BodyTail(body, Pareto(xm, alpha, 1.0), TAIL_SHARE, share)
    return Preset(name, description, model, target)


def _exponential_preset(name: str, description: str, mean_s: float, late_frac: float) -> Preset:
    model = Exponential(mean_s, late_frac)
    n = 1_000_000
    target = Target(late_frac, mean_s, model.expected_max_s(round(n * late_frac)), n, GAME_RATE_PER_S)
    return Preset(name, description, model, target)


# A link's regimes (our choice, from what the QJoin evaluation's hard workload describes): calm
# (tens of ms, half the tuples late), congested (a Pareto tail whose typical maximum over a
# minute of tuples is tens of seconds) and outages (seconds long, the tuples held until the
# link is back). Every parameter can be changed by ``regime:key=value,...`` (:func:`parse_model`).
REGIME_DEFAULTS: dict[str, float] = {
    "calm_mean": 0.02, "calm_late_prob": 0.5, "calm_min": 20.0, "calm_max": 90.0, "calm_weight": 2.0,
    "congested_xm": 0.1, "congested_alpha": 2.2, "congested_late_prob": 0.8,
    "congested_min": 20.0, "congested_max": 90.0, "congested_weight": 1.5,
    "outage_mean": 0.05, "outage_late_prob": 0.9, "outage_min": 2.0, "outage_max": 10.0, "outage_weight": 1.0,
    "rate": GAME_RATE_PER_S,
}  # fmt: skip


def regime_shift(**overrides: float) -> RegimeShift:
    """The calm / congested / outage model, with any of :data:`REGIME_DEFAULTS` overridden.

    >>> m = regime_shift(outage_max=4)
    >>> [(r.name, r.max_s) for r in m.regimes]
    [('calm', 90.0), ('congested', 90.0), ('outage', 4.0)]
    """
    if unknown := sorted(set(overrides) - set(REGIME_DEFAULTS)):
        msg = f"regime model: unknown parameter {', '.join(unknown)} (known: {', '.join(REGIME_DEFAULTS)})"
        raise ConfigError(msg)
    k = REGIME_DEFAULTS | {key: float(v) for key, v in overrides.items()}
    return RegimeShift(
        (
            Regime("calm", Exponential(k["calm_mean"], k["calm_late_prob"]), k["calm_min"], k["calm_max"],
                   k["calm_weight"]),
            Regime("congested", Pareto(k["congested_xm"], k["congested_alpha"], k["congested_late_prob"]),
                   k["congested_min"], k["congested_max"], k["congested_weight"]),
            Regime("outage", Exponential(k["outage_mean"], k["outage_late_prob"]), k["outage_min"],
                   k["outage_max"], k["outage_weight"], hold=True),
        ),
        rate_per_s=k["rate"],
    )  # fmt: skip


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        _body_tail_preset(
            "qjoin_d1",
            "QJoin D1: DEBS 2013 soccer, 13.9 min",
            Target(5_940_703 / 7_122_060, 0.034133, 142.14664, 7_122_060, 8_514.0),
        ),
        _body_tail_preset(
            "qjoin_d2",
            "QJoin D2: DEBS 2013 soccer, 6.4 min",
            Target(3_493_068 / 4_022_600, 0.029597, 170.95926, 4_022_600, 10_037.0),
        ),
        _body_tail_preset(
            "hpm_game1",
            "HPM Game 1: DEBS 2013 soccer",
            Target(313_405 / 544_223, 0.034, 14.2, 544_223, GAME_RATE_PER_S),
        ),
        _body_tail_preset(
            "hpm_game2",
            "HPM Game 2: DEBS 2013 soccer",
            Target(373_664 / 559_211, 0.064, 17.1, 559_211, GAME_RATE_PER_S),
        ),
        _exponential_preset("topk_light", "top-k light disorder (our choice)", 0.5, 0.10),
        _exponential_preset("topk_medium", "top-k medium disorder (our choice)", 1.0, 0.30),
        _exponential_preset("topk_heavy", "top-k heavy disorder (our choice)", 2.0, 0.50),
        Preset(
            "regime_shift",
            "calm / congested / outage regimes of 20-90 s, outages of 2-10 s (our choice)",
            regime_shift(),
        ),
        Preset(
            "regime_shift_fast",
            "the same regimes switching every 5-20 s, outages of 1-4 s (our choice)",
            regime_shift(
                calm_min=5, calm_max=20, congested_min=5, congested_max=20, outage_min=1, outage_max=4
            ),
        ),
    )
}


def parse_model(spec: str) -> AnyDelayModel:
    """A model from a preset name or ``family:key=value,...``.

    >>> parse_model("pareto:xm=0.01,alpha=1.5,late_prob=0.4").describe()
    'pareto(xm=0.01s, alpha=1.5, late_prob=0.4)'
    >>> parse_model("exponential:mean=0.2").describe()
    'exponential(mean=0.2s, late_prob=1)'
    >>> parse_model("bimodal:fast_mean=0.2,slow_median=20,slow_share=0.1").describe()[:56]
    'body_tail(body=exponential(mean=0.2s, late_prob=1), tail'
    >>> parse_model("skew:max_skew=2,mean=0.05").describe()
    'sender_skew(base=exponential(mean=0.05s, late_prob=1), max_skew=2s, skewed_share=1)'
    """
    if spec in PRESETS:
        return PRESETS[spec].model
    family, _, rest = spec.partition(":")
    try:
        kv = {k.strip(): float(v) for k, v in (p.split("=", 1) for p in rest.split(",") if p)}
    except ValueError as e:
        msg = f"bad delay model spec {spec!r}: expected family:key=value,..."
        raise ConfigError(msg) from e
    late = kv.pop("late_prob", 1.0)
    try:
        if family == "exponential":
            return Exponential(kv.pop("mean"), late)
        if family == "lognormal":
            return LogNormal(kv.pop("mu"), kv.pop("sigma"), late)
        if family == "pareto":
            return Pareto(kv.pop("xm"), kv.pop("alpha"), late)
        if family == "bursty":
            calm = Exponential(kv.pop("calm_mean"), kv.pop("calm_late_prob", 0.1))
            burst = Pareto(kv.pop("burst_xm"), kv.pop("burst_alpha"), kv.pop("burst_late_prob", 0.9))
            return Bursty(calm, burst, kv.pop("calm_tuples", 20_000), kv.pop("burst_tuples", 2_000))
        if family == "bimodal":  # a fast majority and a slow minority of their own mode
            slow = LogNormal(math.log(kv.pop("slow_median")), kv.pop("slow_sigma", 0.5))
            return BodyTail(Exponential(kv.pop("fast_mean")), slow, kv.pop("slow_share"), late)
        if family == "skew":
            base = Exponential(kv.pop("mean"), late)
            return SenderSkew(base, kv.pop("max_skew"), kv.pop("skewed_share", 1.0))
        if family == "regime":
            if late != 1.0:
                msg = "regime model: give each regime's late probability (calm_late_prob=, ...)"
                raise ConfigError(msg)
            return regime_shift(**kv)
    except KeyError as e:
        msg = f"delay model {spec!r} lacks parameter {e.args[0]!r}"
        raise ConfigError(msg) from e
    known = ", ".join(sorted(PRESETS))
    msg = (
        f"unknown delay model {spec!r}: use a preset ({known}) or "
        "exponential/lognormal/pareto/bursty/bimodal/skew/regime"
    )
    raise ConfigError(msg)


@dataclass(frozen=True)
class Injection:
    """The arrival sequence made by :func:`inject`.

    ``order[i]`` is the index (into the input) of the i-th tuple to arrive; ``arrival_us`` is each
    input tuple's arrival time (input order).
    """

    order: IntArray
    arrival_us: IntArray
    achieved: DisorderStats
    model: str
    seed: int
    target: Target | None = None
    per_stream: dict[str, DisorderStats] = field(default_factory=dict)
    shifts_us: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))  # abrupt changes (event µs)

    def report(self) -> dict[str, Any]:
        """Achieved vs target disorder, for printing and for the tests."""
        out: dict[str, Any] = {"model": self.model, "seed": self.seed, "achieved": self.achieved.as_report()}
        if self.target is not None:
            out["target"] = {
                "late_frac": round(self.target.late_frac, 6),
                "mean_delay_late": self.target.mean_delay_late_s,
                "max_delay": self.target.max_delay_s,
                "at_tuples": self.target.tuples,
            }
        return out


def inject(
    event_us: Sequence[int] | IntArray,
    model: AnyDelayModel | str,
    seed: int,
    streams: Sequence[str] | None = None,
    senders: Sequence[int] | IntArray | None = None,
) -> Injection:
    """Delay every tuple with ``model`` (seeded) and return the arrival order and its disorder.

    ``event_us`` need not be sorted; ties in arrival time keep the input order, so the result is
    a pure function of (input, model, seed). ``senders`` (ids >= 0) matter to a model whose
    delays depend on the sender (:class:`~outoforder.core.delay_regimes.SenderSkew`).
    """
    ts = np.asarray(event_us, dtype=np.int64)
    preset = PRESETS.get(model) if isinstance(model, str) else None
    m = parse_model(model) if isinstance(model, str) else model
    rng = np.random.default_rng(seed)
    drawn = draw(m, rng, ts, senders)
    delay_s = drawn.delay_s
    if delay_s.size and not (np.isfinite(delay_s).all() and delay_s.max() < MAX_DELAY_S):
        msg = (
            f"{m.describe()} drew a delay of {delay_s.max():.3g} s (limit {MAX_DELAY_S:g} s): "
            "the model's tail is too heavy for this stream; raise alpha or lower xm"
        )
        raise ConfigError(msg)
    delay_us = np.rint(delay_s * US_PER_SECOND).astype(np.int64)
    arrival = ts + delay_us
    order = np.lexsort((np.arange(ts.size), arrival)).astype(np.int64)
    per_stream: dict[str, DisorderStats] = {}
    if streams is not None:
        s = np.asarray(streams)[order]
        for name in np.unique(s):
            per_stream[str(name)] = disorder_stats(ts[order][s == name])
    return Injection(
        order=order,
        arrival_us=arrival,
        achieved=disorder_stats(ts[order]),
        model=m.describe(),
        seed=seed,
        target=preset.target if preset else None,
        per_stream=per_stream,
        shifts_us=drawn.shifts_us,
    )


def ooo_trace_delays(data_dir: Path, files: Sequence[str] = ("d-1", "d-2", "d-3", "d-4", "d-5")) -> Empirical:
    """The OoO-Dataset's real transmission delays (server receive - client detection) as a model.

    Real phones over public UMTS (Weiss et al., IoTBDS 2017): median ~0.1 s, p99 ~0.3 s, maximum
    5.5 s. Negative differences (clock offsets of a few ms left after NTP) count as 0.
    """
    from outoforder.sources.parsing import read_file
    from outoforder.sources.readers import OooReader

    delays: list[IntArray] = []
    for name in files:
        path = data_dir / "ooo-dataset" / f"{name}.csv.gz"
        if not path.is_file():
            msg = f"the delay trace needs {path} (the shared data folder)"
            raise ConfigError(msg)
        for batch in read_file(path, OooReader()):
            t = batch.accepted
            if t.num_rows:
                ev = t.column("event_ts").to_numpy()
                ar = t.column("arrival_ts").to_numpy()
                delays.append(np.maximum(ar - ev, 0).astype(np.int64))
    us = np.concatenate(delays) if delays else np.zeros(0, np.int64)
    return Empirical(tuple((us / US_PER_SECOND).tolist()), name=f"ooo {'+'.join(files)}")
