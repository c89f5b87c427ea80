"""The aggregate benchmark's hindsight constant K: the smallest meeting (ε, δ), as the reference runs it."""

from benchmarks import aggregate as bench


def test_the_hindsight_constant_k_is_the_smallest_meeting_the_target_and_the_reference_agrees():
    case = bench.soccer_case("game", "hpm_game1", 6.0, 1, "a short synthetic game")
    best = bench.hindsight_slack(case)
    target = 1.0 - case.query.delta
    assert best % bench.HINDSIGHT_STEP_US == 0
    assert bench.met_share_at(case, best) >= target
    assert best == 0 or bench.met_share_at(case, best - bench.HINDSIGHT_STEP_US) < target
    rec, _ = bench.run_reference(case, "hindsight", best)  # tuple at a time, the same K throughout
    assert rec["windows_meeting_target"] == bench.met_share_at(case, best)
    assert rec["mean_k"] == best / 1e6
