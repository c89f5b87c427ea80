"""Listing a topic's offsets rides out a partition whose leader is moving, and fails on anything else.

No broker: the admin client is a fake that answers like one whose topic was just created.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from outoforder.errors import InputError
from outoforder.io import kafka


class Done:
    def __init__(self, value):
        self.value = value

    def result(self):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class Admin:
    """Two partitions; ``list_offsets`` fails with ``errors`` (one per call) before it answers."""

    def __init__(self, errors):
        self.errors = list(errors)
        self.calls = 0

    def describe_topics(self, topics, request_timeout):
        parts = [SimpleNamespace(id=0), SimpleNamespace(id=1)]
        return {"t": Done(SimpleNamespace(partitions=parts, topic_id="id-1"))}

    def describe_configs(self, resources, request_timeout):
        return {resources[0]: Done({"message.timestamp.type": SimpleNamespace(value=kafka.LOG_APPEND_TIME)})}

    def list_offsets(self, specs, request_timeout):
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return {tp: Done(SimpleNamespace(offset=10 * tp.partition + self.calls)) for tp in specs}


def test_a_moving_leader_is_waited_for(monkeypatch):
    admin = Admin([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    monkeypatch.setattr(kafka, "_admin", lambda bootstrap: admin)
    monkeypatch.setattr(kafka, "RETRY_S", 0.0)
    state = kafka.topic_state("b:9092", "t")
    assert admin.calls == 4  # two failed tries, then the earliest and the latest offsets
    assert state.offsets == {0: (3, 4), 1: (13, 14)} and state.topic_id == "id-1"


def test_another_error_fails_at_once_naming_the_topic(monkeypatch):
    admin = Admin([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    monkeypatch.setattr(kafka, "_admin", lambda bootstrap: admin)
    with pytest.raises(InputError, match="cannot list the offsets of topic 't'"):
        kafka.topic_state("b:9092", "t")
    assert admin.calls == 1
