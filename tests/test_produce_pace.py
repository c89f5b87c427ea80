"""A paced replay's sending times: never early, never a burst after a stall, back on schedule after it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from outoforder.stages.ingest.produce import CATCH_UP, SLEEP_MIN_S, paced


class Clock:
    """A fake clock: sleeping moves it on, and so does a stall (a fetch, a busy machine) before a record."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        assert s > 0
        self.t += s


@settings(max_examples=200, deadline=None)
@given(
    gaps_us=st.lists(st.integers(0, 50_000), min_size=2, max_size=300),
    stalls=st.dictionaries(st.integers(0, 299), st.floats(0.0, 3.0), max_size=5),
    speed=st.sampled_from([0.1, 1.0, 4.0]),
)
def test_a_paced_replay_is_never_early_and_catches_up_without_a_burst(gaps_us, stalls, speed):
    arrivals = [sum(gaps_us[: i + 1]) for i in range(len(gaps_us))]
    clock = Clock()

    def stalled():
        for i, a in enumerate(arrivals):
            clock.t += stalls.get(i, 0.0)  # the record comes late from its fetch
            yield a

    sent = list(paced(stalled(), speed, clock, clock.sleep))
    assert len(sent) == len(arrivals)
    start = sent[0]
    due = [(a - arrivals[0]) / 1e6 / speed for a in arrivals]
    for i in range(1, len(sent)):
        # never before its time (up to the shortest sleep)
        assert sent[i] - start >= due[i] - SLEEP_MIN_S - 1e-9
        # never faster than CATCH_UP times the pace over any stretch (a burst sends a stretch at once)
        for j in range(max(0, i - 20), i):
            assert sent[i] - sent[j] >= (due[i] - due[j]) / CATCH_UP - SLEEP_MIN_S - 1e-9
    # with no stall in its last stretch, a long enough replay is back on schedule
    total_stall = sum(stalls.values())
    behind = (sent[-1] - start) - due[-1]
    assert behind <= total_stall + SLEEP_MIN_S + 1e-9


def test_without_pace_every_record_goes_at_once():
    clock = Clock()
    assert list(paced(iter([5, 1_000_000, None]), 0.0, clock, clock.sleep)) == [100.0, 100.0, 100.0]
