import math

import numpy as np
import pytest

from outoforder.core.delay_models import BodyTail, Bursty, Empirical, Exponential, LogNormal, Pareto
from outoforder.core.delay_regimes import Regime, RegimeShift, SenderSkew, draw
from outoforder.errors import ConfigError

MODELS = [
    Exponential(0.2, 0.5),
    LogNormal(-3.0, 1.0, 0.7),
    Pareto(0.01, 1.5, 0.3),
    Bursty(Exponential(0.01, 0.1), Pareto(0.05, 1.2, 0.9), 500, 100),
    BodyTail(LogNormal(-4.0, 1.0), Pareto(0.5, 1.2), 0.01, 0.6),
    Empirical((0.05, 0.1, 0.2, 3.0), late_prob=0.4),
    BodyTail(Exponential(0.3), LogNormal(math.log(20.0), 0.5), 0.1, 0.9),  # bimodal
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.describe().split("(")[0])
def test_every_model_is_seeded_non_negative_and_zero_inflated(model):
    a = model.sample(np.random.default_rng(42), 50_000)
    b = model.sample(np.random.default_rng(42), 50_000)
    assert np.array_equal(a, b)
    assert (a >= 0).all()
    delayed = float((a > 0).mean())
    assert delayed == pytest.approx(model.late_prob, abs=0.02)


def test_lognormal_fit_hits_mean_and_typical_max():
    m = LogNormal.fit(mean_s=0.034, max_s=14.2, n_late=313_405, late_prob=1.0)
    assert math.exp(m.mu + m.sigma**2 / 2) == pytest.approx(0.034)
    assert m.expected_max_s(313_405) == pytest.approx(14.2)


def test_lognormal_fit_refuses_impossible_targets():
    with pytest.raises(ConfigError):
        LogNormal.fit(mean_s=1.0, max_s=0.5, n_late=100, late_prob=1.0)


def test_pareto_typical_max_matches_simulation():
    m = Pareto(0.01, 1.5)
    maxima = [m.sample(np.random.default_rng(s), 1000).max() for s in range(201)]
    assert float(np.median(maxima)) == pytest.approx(m.expected_max_s(1000), rel=0.15)


def test_bursty_regimes_have_the_configured_share_and_cluster():
    m = Bursty(Exponential(0.01, 0.0), Exponential(1.0, 1.0), calm_tuples=900, burst_tuples=100)
    regimes = m.regimes(np.random.default_rng(3), 200_000)
    assert regimes.mean() == pytest.approx(0.1, abs=0.03)
    switches = np.count_nonzero(regimes[1:] != regimes[:-1])
    assert switches < 200_000 / 100  # runs, not independent coin flips
    d = m.sample(np.random.default_rng(3), 200_000)
    assert (d > 0).mean() == pytest.approx(m.late_prob, abs=0.03)


def test_invalid_parameters_fail_clearly():
    with pytest.raises(ConfigError, match="probability"):
        Exponential(1.0, late_prob=1.5)
    with pytest.raises(ConfigError):
        Pareto(0.0, 1.0)


def test_trace_driven_model_resamples_the_trace_and_refuses_bad_ones():
    trace = (0.05, 0.1, 0.2, 3.0)
    d = Empirical(trace).sample(np.random.default_rng(1), 20_000)
    assert set(np.unique(d).tolist()) == set(trace)
    assert float(d.mean()) == pytest.approx(np.mean(trace), rel=0.05)
    assert Empirical(trace).expected_max_s(10_000) == 3.0
    for bad in ((), (0.1, -1.0), (0.1, float("nan"))):
        with pytest.raises(ConfigError, match="delay trace"):
            Empirical(bad)


def test_regime_schedules_keep_their_durations_never_repeat_and_share_time_as_stated():
    from outoforder.core.delay_regimes import Regime, RegimeShift

    a = Regime("a", Exponential(0.01, 0.0), 10, 30, weight=1.0)
    b = Regime("b", Exponential(1.0, 1.0), 1, 3, weight=1.0)
    c = Regime("c", Exponential(0.1, 1.0), 5, 5, weight=3.0, hold=True)
    m = RegimeShift((a, b, c))
    starts, which = m.schedule(np.random.default_rng(2), 0.0, 200_000.0)
    lengths = np.diff(starts)
    for i, r in enumerate(m.regimes):
        mine = lengths[which[:-1] == i]
        assert r.min_s - 1e-6 <= mine.min() and mine.max() <= r.max_s + 1e-6
    assert (which[1:] != which[:-1]).all() and which[0] == 0
    spent = [lengths[which[:-1] == i].sum() / lengths.sum() for i in range(3)]
    assert spent == pytest.approx(m.time_shares(), abs=0.02)
    # a held regime's delayed tuples leave when it ends, in order of their own jitter
    event_s = np.arange(0, 600, 0.01)
    d = m.sample_at(np.random.default_rng(5), event_s)
    starts, which = m.schedule(np.random.default_rng(5), 0.0, event_s[-1])
    slot = m.regime_at(starts, event_s)
    ends = np.append(starts[1:], np.inf)[slot]
    held = (which[slot] == 2) & (d > 0) & np.isfinite(ends)
    assert held.any() and (event_s[held] + d[held] >= ends[held] - 1e-9).all()


def test_regime_shifts_refuse_bad_regimes():
    from outoforder.core.delay_regimes import Regime, RegimeShift

    with pytest.raises(ConfigError, match="min_s"):
        Regime("x", Exponential(0.1), 5, 1)
    with pytest.raises(ConfigError, match="at least two"):
        RegimeShift((Regime("x", Exponential(0.1), 1, 2),))
    with pytest.raises(ConfigError, match="repeat"):
        RegimeShift((Regime("x", Exponential(0.1), 1, 2), Regime("x", Exponential(0.1), 1, 2)))


def test_a_bimodal_link_has_a_fast_majority_and_a_slow_minority_of_its_own_mode():
    m = BodyTail(Exponential(0.3), LogNormal(math.log(20.0), 0.5), 0.1, 1.0)
    d = m.sample(np.random.default_rng(1), 100_000)
    assert float((d > 5).mean()) == pytest.approx(0.1 * 0.997, abs=0.005)  # the slow mode, all above 5 s
    assert float(np.median(d[d > 5])) == pytest.approx(20.0, rel=0.05)
    assert float((d < 3).mean()) == pytest.approx(0.9, abs=0.005)


def test_a_skewed_sender_s_tuples_all_look_late_by_its_own_constant():
    m = SenderSkew(Exponential(0.01, 0.0), max_skew_s=5.0, skewed_share=0.5)
    senders = np.repeat(np.arange(40), 50)
    d = m.sample_senders(np.random.default_rng(3), senders)
    per = d.reshape(40, 50)
    assert (per == per[:, :1]).all()  # one constant per sender (the base model never delays here)
    assert 0.3 < float((per[:, 0] > 0).mean()) < 0.7  # about half the senders lag
    assert per.max() <= 5.0
    again = m.sample_senders(np.random.default_rng(3), senders)
    assert np.array_equal(d, again)
    with pytest.raises(ConfigError, match="max_skew_s"):
        SenderSkew(Exponential(0.1), max_skew_s=-1.0)


def test_draw_names_the_abrupt_shifts_and_gives_the_models_own_delays():
    ts = np.arange(0, 120_000_000, 10_000, dtype=np.int64)
    calm, busy = Regime("calm", Exponential(0.01), 20, 40), Regime("busy", Exponential(1.0), 20, 40)
    regime = RegimeShift((calm, busy))
    got = draw(regime, np.random.default_rng(5), ts)
    assert np.array_equal(got.delay_s, regime.sample_at(np.random.default_rng(5), ts / 1e6))
    assert 2 <= got.shifts_us.size <= 5 and (np.diff(got.shifts_us) >= 20_000_000 - 1).all()
    bursty = Bursty(Exponential(0.01, 0.1), Pareto(0.05, 1.2, 0.9), 500, 100)
    got = draw(bursty, np.random.default_rng(6), ts)
    assert np.array_equal(got.delay_s, bursty.sample(np.random.default_rng(6), ts.size))
    in_burst = bursty.regimes(np.random.default_rng(6), ts.size)
    assert got.shifts_us.size == int((np.diff(in_burst.astype(int)) != 0).sum()) > 10
    steady = draw(Exponential(0.2), np.random.default_rng(7), ts)
    assert steady.shifts_us.size == 0
