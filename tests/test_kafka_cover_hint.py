"""The stream stages wait for the Kafka ingest on its coverage hint, not on three Delta reads a poll.

No Spark: the look at bronze's bookkeeping (``covered_until``) is replaced by a counter; the hint is
a real file.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from outoforder.config import load_settings
from outoforder.stages.ingest import kafka_batches as stage


@pytest.fixture
def settings(tmp_path):
    base = load_settings(
        env={"OOO_LAKE_ROOT": str(tmp_path / "lake"), "OOO_WORK_DIR": str(tmp_path / "work")}
    )
    return dataclasses.replace(
        base, kafka=dataclasses.replace(base.kafka, cover_wait_s=0.3, cover_poll_s=0.01)
    )


def looks(monkeypatch, covered):
    """Replace the Delta look by one that answers ``covered()`` and counts its calls."""
    calls = []

    def covered_until(settings, source):
        calls.append(source)
        return covered()

    monkeypatch.setattr(stage, "covered_until", covered_until)
    return calls


def test_a_hint_short_of_the_end_saves_the_looks_and_the_wait_ends_with_what_is_covered(
    settings, monkeypatch
):
    calls = looks(monkeypatch, lambda: 100)
    stage.write_cover_hint(settings, "yard/a", 100)
    assert stage.read_cover_hint(settings, "yard/a") == 100
    assert stage.wait_covered(settings, "yard/a", 500) == 100  # the pass then processes up to 100
    # ~30 polls in 0.3 s: the first look, then one every HINT_POLLS polls (not one per poll)
    assert 2 <= len(calls) <= 1 + 30 // stage.HINT_POLLS + 1


def test_without_a_hint_or_with_another_lakes_every_poll_looks(settings, monkeypatch):
    calls = looks(monkeypatch, lambda: 100)
    assert stage.wait_covered(settings, "yard", 500) == 100
    unhinted = len(calls)
    assert unhinted > 1 + 30 // stage.HINT_POLLS + 1
    other = dataclasses.replace(settings, lake_root=settings.lake_root + "-other")
    stage.write_cover_hint(other, "yard", 100)  # same work dir, another lake: not this lake's hint
    assert stage.read_cover_hint(settings, "yard") is None


def test_the_wait_ends_at_the_look_after_the_hint_covers_the_interval(settings, monkeypatch):
    truth = {"covered": 100}
    calls = looks(monkeypatch, lambda: truth["covered"])
    stage.write_cover_hint(settings, "yard", 100)
    polls = 0
    real_sleep = stage.time.sleep
    me = threading.get_ident()

    def sleep(s):  # the ingest commits during the third poll's wait
        nonlocal polls
        if threading.get_ident() != me:  # the patch is process-wide: other threads (Spark's) sleep too
            real_sleep(s)
            return
        polls += 1
        if polls == 3:
            truth["covered"] = 600
            stage.write_cover_hint(settings, "yard", 600)
        real_sleep(s)

    monkeypatch.setattr(stage.time, "sleep", sleep)
    assert stage.wait_covered(settings, "yard", 500) == 600
    assert calls == ["yard", "yard"]  # before the wait, and once the hint said so
    assert polls == 3
