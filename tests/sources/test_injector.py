import numpy as np
import pytest

from outoforder.core.disorder import disorder_stats
from outoforder.errors import ConfigError
from outoforder.sources.disorder import PRESETS, inject, parse_model


def stream(n, rate, seed=0):
    return np.sort(np.random.default_rng(seed).integers(0, int(n / rate * 1e6), n))


def test_injection_is_reproducible_for_a_seed_and_differs_across_seeds():
    ts = stream(20_000, 10_000)
    a, b, c = inject(ts, "hpm_game1", 5), inject(ts, "hpm_game1", 5), inject(ts, "hpm_game1", 6)
    assert np.array_equal(a.order, b.order) and np.array_equal(a.arrival_us, b.arrival_us)
    assert not np.array_equal(a.order, c.order)


def test_order_is_a_permutation_sorted_by_arrival():
    ts = stream(10_000, 10_000)
    r = inject(ts, "topk_heavy", 1)
    assert sorted(r.order.tolist()) == list(range(ts.size))
    assert (np.diff(r.arrival_us[r.order]) >= 0).all()
    assert (r.arrival_us >= ts).all()
    assert r.achieved == disorder_stats(ts[r.order])


@pytest.mark.parametrize("name", sorted(n for n, p in PRESETS.items() if p.target is not None))
def test_presets_achieve_their_target_late_fraction_and_mean(name):
    p = PRESETS[name]
    # long enough that tuples delayed past the end of the replay (whose measured delay is cut
    # short by the end of the stream) are a small minority even for 2 s mean delays
    ts = stream(int(120 * p.target.rate_per_s), p.target.rate_per_s, seed=11)
    r = inject(ts, name, seed=2)
    a = r.achieved
    assert a.late_frac == pytest.approx(p.target.late_frac, abs=0.01)
    assert a.mean_delay_late_us / 1e6 == pytest.approx(p.target.mean_delay_late_s, rel=0.06)
    expected_max = p.model.expected_max_s(a.late)
    assert 0.25 * expected_max <= a.max_delay_us / 1e6 <= 4 * expected_max


def test_report_names_model_target_and_achieved():
    rep = inject(stream(5_000, 10_000), "qjoin_d1", 3).report()
    assert rep["target"]["max_delay"] == pytest.approx(142.14664)
    assert set(rep["achieved"]) >= {"late_frac", "mean_delay_late", "max_delay"}


def test_model_specs_parse_and_reject_nonsense():
    assert parse_model("bursty:calm_mean=0.01,burst_xm=0.05,burst_alpha=1.2").late_prob > 0
    with pytest.raises(ConfigError, match="unknown delay model"):
        parse_model("gamma:k=2")
    with pytest.raises(ConfigError, match="lacks parameter"):
        parse_model("pareto:xm=0.1")
    with pytest.raises(ConfigError, match="bad delay model"):
        parse_model("pareto:xm=abc")


def test_ooo_trace_holds_every_real_delay_of_the_five_sessions(data_dir, tmp_path):
    from outoforder.sources.disorder import ooo_trace_delays

    m = ooo_trace_delays(data_dir)
    d = np.array(m.delays_s)
    assert d.size == 9600 + 10800 + 9600 + 8400 + 8400  # every row of d-1..d-5
    assert d.min() >= 0
    assert d.max() == pytest.approx(5.531, abs=0.001)  # d-3's slowest transmission (README)
    assert 0.08 < float(np.median(d)) < 0.12  # README: per-file medians 77-114 ms
    with pytest.raises(ConfigError, match="needs"):
        ooo_trace_delays(tmp_path)


def test_regime_shift_presets_switch_between_calm_congested_and_outage_in_event_time():
    from outoforder.core.delay_regimes import RegimeShift

    ts = stream(1_800 * 1_000, 1_000, seed=4)  # half an hour at 1,000 tuples/s
    model = PRESETS["regime_shift"].model
    assert isinstance(model, RegimeShift)
    r = inject(ts, "regime_shift", seed=9)
    delay_s = (r.arrival_us - ts) / 1e6
    starts, which = model.schedule(np.random.default_rng(9), ts[0] / 1e6, ts[-1] / 1e6)
    slot = model.regime_at(starts, ts / 1e6)
    names = np.array([model.regimes[i].name for i in which])[slot]
    calm, congested, outage = (delay_s[names == n] for n in ("calm", "congested", "outage"))
    assert min(len(calm), len(congested), len(outage)) > 0
    assert (calm > 0).mean() == pytest.approx(0.5, abs=0.02)
    assert 0.01 < float(calm[calm > 0].mean()) < 0.05  # tens of ms
    assert float(np.percentile(congested, 99.9)) > 1.0  # a heavy tail
    assert (outage > 0).mean() == pytest.approx(0.9, abs=0.02) and float(np.median(outage)) > 0.5
    # the same seed, the same schedule: reproducible with its regimes
    assert np.array_equal(inject(ts, "regime_shift", seed=9).order, r.order)


def test_regime_specs_parse_with_defaults_and_reject_unknown_parameters():
    m = parse_model("regime:outage_max=4,calm_late_prob=0.2")
    assert [r.max_s for r in m.regimes] == [90.0, 90.0, 4.0] and m.regimes[0].delay.late_prob == 0.2
    with pytest.raises(ConfigError, match="unknown parameter calm_jitter"):
        parse_model("regime:calm_jitter=1")
    with pytest.raises(ConfigError, match="each regime's late probability"):
        parse_model("regime:late_prob=0.5")
