"""Streams of other shapes than the soccer game, for judging the estimators where nobody tuned them.

The quality promise ("your target, met in >= 95 % of periods, with the least buffer") must hold on
streams the estimators' constants were not chosen on (docs/quality.md, "The join's promise on
streams nobody tuned for"). A *shape* is a stream's layout in event time -- who sends, how
often, what joins with what -- and comes with the join a user would run on it; a *delay family*
(:data:`FAMILIES`) is how its tuples reach the server. Shapes, all seeded and vectorised:

- ``fleet``: vehicles reporting GPS positions (metres) once a second, half of them R and half
  S; a pair is two vehicles within ``theta`` of each other within ``w`` (a few pairs a second);
- ``meters``: smart meters reading every few seconds (R) and the grid's control events for the
  same meters at random times (S), joined on the meter id;
- ``clicks``: ad impressions (R) and the clicks that follow some of them seconds later (S), joined
  on the user id; users come and go in sessions, so the rate of pairs varies;
- ``soccer``: the synthetic game (ball vs. players) at a reduced rate.

Each builds a :class:`Workload` in event order (with each tuple's sender, for clock skews);
:func:`arrive` turns it into an arrival sequence under a family.

>>> w = fleet(seconds=60, vehicles=10, seed=1)
>>> w.name, len(w.ts), sorted(set(w.side.tolist())), w.query.predicate
('fleet-10', 600, [0, 1], 'distance')
>>> a = arrive(w, "bimodal", seed=1)
>>> bool((np.sort(a.inp.ts) == np.sort(w.ts)).all()), a.shifts_us.size
(True, 0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from outoforder.core.delay_models import BodyTail, Exponential, LogNormal, Pareto
from outoforder.core.delay_regimes import AnyDelayModel, Regime, RegimeShift, SenderSkew
from outoforder.core.joins.query import JoinInput, JoinQuery, R, S
from outoforder.core.time import US_PER_SECOND
from outoforder.errors import ConfigError
from outoforder.sources.disorder import inject, regime_shift

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Workload:
    """One stream in event order: each tuple's side, event time (µs), position, key and sender."""

    name: str
    side: IntArray
    ts: IntArray
    x: FloatArray
    y: FloatArray
    key: IntArray
    sender: IntArray
    query: JoinQuery  # the join a user would run on it
    period_us: int  # P: the period its recall is judged over
    interval_us: int  # L: how often the controller adapts
    granularity_us: int  # g: the step of the retention search

    def __post_init__(self) -> None:
        n = self.ts.size
        if any(a.size != n for a in (self.side, self.x, self.y, self.key, self.sender)):
            msg = f"workload {self.name}: columns of different lengths"
            raise ConfigError(msg)


@dataclass(frozen=True)
class Arrivals:
    """A workload's arrival sequence under one delay family."""

    workload: str
    family: str
    inp: JoinInput
    arrival_us: IntArray
    shifts_us: IntArray  # where the delay process changed abruptly (event µs)
    model: str


def _sorted(
    name: str, cols: dict[str, npt.NDArray[np.generic]], query: JoinQuery, cadence: tuple[int, int, int]
) -> Workload:
    o = np.lexsort((cols["sender"], cols["ts"]))
    return Workload(
        name,
        cols["side"][o].astype(np.int64),
        cols["ts"][o].astype(np.int64),
        cols["x"][o].astype(np.float64),
        cols["y"][o].astype(np.float64),
        cols["key"][o].astype(np.int64),
        cols["sender"][o].astype(np.int64),
        query,
        *cadence,
    )


def fleet(
    seconds: float = 600.0, vehicles: int = 10, hz: float = 1.0, area_m: float = 600.0, seed: int = 0
) -> Workload:
    """Vehicles driving around a district of ``area_m`` square, reporting their position at ``hz``.

    Each vehicle's velocity is mean-reverting (about 8 m/s, turning every half minute), reflected
    at the district's edge; senders start at random phases of the second. The even-numbered
    vehicles are R, the odd ones S; the join pairs two reports within 60 m and 2 s.
    """
    rng = np.random.default_rng(seed)
    steps = int(seconds * hz)
    dt = 1.0 / hz
    pos = rng.uniform(0, area_m, (vehicles, 2))
    vel = rng.normal(0, 8.0, (vehicles, 2))
    track = np.empty((steps, vehicles, 2))
    for i in range(steps):
        vel += -vel * dt / 30.0 + rng.normal(0, 8.0 * np.sqrt(2 * dt / 30.0), vel.shape)
        pos += vel * dt
        low, high = pos < 0, pos > area_m
        pos[low], pos[high] = -pos[low], 2 * area_m - pos[high]
        vel[low | high] *= -1
        track[i] = pos
    phase = rng.integers(0, int(dt * US_PER_SECOND), vehicles)
    ts = (np.arange(steps)[:, None] * int(dt * US_PER_SECOND) + phase[None, :]).ravel()
    sender = np.tile(np.arange(vehicles), steps)
    query = JoinQuery(2_000_000, theta=60.0, predicate="distance")
    cadence = (60_000_000, 10_000_000, 100_000)  # P, L, g
    cols = {
        "side": np.where(sender % 2 == 0, R, S), "ts": ts, "x": track[:, :, 0].ravel(),
        "y": track[:, :, 1].ravel(), "key": np.zeros(ts.size, np.int64), "sender": sender,
    }  # fmt: skip
    return _sorted(f"fleet-{vehicles}", cols, query, cadence)


def meters(
    seconds: float = 600.0,
    n_meters: int = 100,
    every_s: float = 5.0,
    events_per_s: float = 5.0,
    seed: int = 0,
) -> Workload:
    """Meters reading every ``every_s`` (R) and control events for random meters (S), joined by meter.

    Readings jitter by up to a tenth of their period; control events are a Poisson stream of
    ``events_per_s`` over all meters. A pair is a reading and an event of one meter within 3 s.
    """
    rng = np.random.default_rng(seed)
    period = int(every_s * US_PER_SECOND)
    k = int(seconds / every_s)
    phase = rng.integers(0, period, n_meters)
    r_ts = np.arange(k)[:, None] * period + phase[None, :] + rng.integers(0, period // 10 + 1, (k, n_meters))
    r_key = np.tile(np.arange(n_meters), k)
    n_ev = int(rng.poisson(events_per_s * seconds))
    s_ts = rng.integers(0, int(seconds * US_PER_SECOND), n_ev)
    s_key = rng.integers(0, n_meters, n_ev)
    query = JoinQuery(3_000_000, predicate="key")
    cadence = (60_000_000, 10_000_000, 100_000)  # P, L, g
    ts = np.concatenate([r_ts.ravel(), s_ts])
    key = np.concatenate([r_key, s_key])
    cols = {
        "side": np.concatenate([np.full(r_key.size, R), np.full(n_ev, S)]), "ts": ts,
        "x": np.zeros(ts.size), "y": np.zeros(ts.size), "key": key,
        "sender": key,  # a meter and its control relay share one clock
    }  # fmt: skip
    return _sorted(f"meters-{n_meters}", cols, query, cadence)


def clicks(
    seconds: float = 600.0, users: int = 2_000, sessions_per_s: float = 2.0, click_prob: float = 0.15,
    edges: int = 8, seed: int = 0,
) -> Workload:  # fmt: skip
    """Impressions (R) and clicks (S) of users in sessions, joined by user within 10 s.

    Sessions start as a Poisson stream and last 30-300 s, with an impression every 5 s on
    average; a share ``click_prob`` of impressions get a click 0.5-8 s later. Users reach the
    service through ``edges`` edge servers (the senders: one clock each).
    """
    rng = np.random.default_rng(seed)
    span = int(seconds * US_PER_SECOND)
    n_sess = int(rng.poisson(sessions_per_s * seconds))
    start = rng.integers(0, span, n_sess)
    length = rng.uniform(30, 300, n_sess) * US_PER_SECOND
    user = rng.integers(0, users, n_sess)
    per = rng.poisson(length / (5 * US_PER_SECOND))
    sess = np.repeat(np.arange(n_sess), per)
    imp_ts = start[sess] + (rng.random(sess.size) * length[sess]).astype(np.int64)
    keep = imp_ts < span
    sess, imp_ts = sess[keep], imp_ts[keep]
    clicked = rng.random(sess.size) < click_prob
    click_ts = imp_ts[clicked] + rng.uniform(0.5, 8.0, int(clicked.sum())) * US_PER_SECOND
    ts = np.concatenate([imp_ts, click_ts.astype(np.int64)])
    key = np.concatenate([user[sess], user[sess[clicked]]])
    query = JoinQuery(10_000_000, predicate="key")
    cadence = (60_000_000, 10_000_000, 100_000)  # P, L, g
    cols = {
        "side": np.concatenate([np.full(imp_ts.size, R), np.full(click_ts.size, S)]), "ts": ts,
        "x": np.zeros(ts.size), "y": np.zeros(ts.size), "key": key, "sender": key % edges,
    }  # fmt: skip
    return _sorted(
        f"clicks-{sessions_per_s:g}", cols, query, cadence
    )  # named by how many sessions start a second


def soccer(seconds: float = 300.0, seed: int = 0) -> Workload:
    """The synthetic game at a tenth of its rate (ball 200 Hz, legs 20 Hz), ball vs. players."""
    from outoforder.sources.synthetic import SoccerConfig, generate_soccer

    play = generate_soccer(SoccerConfig(seconds=seconds, ball_hz=200, player_hz=20, seed=seed))
    names = np.array(play.stream_of())
    query = JoinQuery(2_000_000, theta=5.0, predicate="distance")
    cadence = (10_000_000, 1_000_000, 10_000)  # P, L, g
    cols = {
        "side": np.where(names == "ball", R, S), "ts": play.ts_ps // 1_000_000,
        "x": play.xyz_mm[:, 0] / 1000.0, "y": play.xyz_mm[:, 1] / 1000.0,
        "key": np.zeros(names.size, np.int64), "sender": play.sid.astype(np.int64),
    }  # fmt: skip
    return _sorted("soccer", cols, query, cadence)


SHAPES: dict[str, Callable[..., Workload]] = {
    "fleet": fleet,
    "meters": meters,
    "clicks": clicks,
    "soccer": soccer,
}


def _families() -> dict[str, Callable[[], AnyDelayModel]]:
    return {
        # most delays a fraction of a second, about a tenth tens of seconds (a fleet's dead zones)
        "bimodal": lambda: BodyTail(Exponential(0.3), LogNormal(np.log(20.0), 0.5), 0.1, 0.9),
        # power law: rare delays of minutes
        "heavy_tail": lambda: Pareto(0.05, 1.1, 0.6),
        # a steady lognormal link
        "lognormal": lambda: LogNormal(np.log(0.4), 1.0, 0.7),
        # calm / congested / outage regimes of 20-90 s (the benchmark's preset)
        "regimes": regime_shift,
        # the link goes down for 5-30 s every one to three minutes
        "outages": lambda: regime_shift(
            calm_min=60, calm_max=180, congested_weight=0.01, outage_min=5, outage_max=30, outage_weight=100
        ),
        # bursts of congestion, 5-15 s every half minute to two minutes of a calm link
        "bursts": lambda: RegimeShift(
            (
                Regime("calm", Exponential(0.2, 0.3), 30.0, 120.0),
                Regime("burst", Pareto(1.0, 1.5, 0.9), 5.0, 15.0),
            )
        ),
        # each sender's clock lags by up to 5 s, on top of small network delays
        "skew": lambda: SenderSkew(Exponential(0.1, 0.5), 5.0, 0.5),
    }


FAMILIES: tuple[str, ...] = tuple(_families())


def family_model(name: str) -> AnyDelayModel:
    """The delay model of a family (:data:`FAMILIES`).

    >>> family_model("skew").describe()
    'sender_skew(base=exponential(mean=0.1s, late_prob=0.5), max_skew=5s, skewed_share=0.5)'
    """
    made = _families().get(name)
    if made is None:
        msg = f"unknown delay family {name!r}; known: {', '.join(FAMILIES)}"
        raise ConfigError(msg)
    return made()


def arrive(workload: Workload, family: str, seed: int) -> Arrivals:
    """The workload's arrival sequence under a delay family (seeded)."""
    inj = inject(workload.ts, family_model(family), seed, senders=workload.sender)
    o = inj.order
    inp = JoinInput(workload.side[o], workload.ts[o], workload.x[o], workload.y[o], workload.key[o])
    return Arrivals(workload.name, family, inp, inj.arrival_us[o], inj.shifts_us, inj.model)
