"""What the driver asks a Kafka cluster: a topic's id, partitions, offsets and timestamp type.

The Kafka ingest (:mod:`outoforder.stages.ingest.kafka`) plans each batch from these answers before
Spark reads a record: offsets that expired, or a topic that was deleted and created again, must stop
the run with the partitions and offsets named, never be skipped (Spark's ``failOnDataLoss`` stays on
as a backstop). Also the producer the demos and benchmarks replay datasets with.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from outoforder.errors import InputError

log = logging.getLogger(__name__)
LOG_APPEND_TIME = "LogAppendTime"
TIMEOUT_S = 15.0
RETRY_S = 0.2  # between two tries of a request the broker answered with a retriable error


@dataclass(frozen=True)
class TopicState:
    """A topic as the broker sees it now: ``offsets[p] = (earliest, latest)`` per partition."""

    topic: str
    topic_id: str
    offsets: Mapping[int, tuple[int, int]]
    timestamp_type: str  # "LogAppendTime" or "CreateTime"


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(TIMEOUT_S * 1000)})


def _admin_module() -> Any:
    """confluent_kafka.admin, untyped (its names are not declared exports)."""
    import confluent_kafka.admin

    return confluent_kafka.admin


def _fail(bootstrap: str, what: str, e: Exception) -> InputError:
    return InputError(f"Kafka at {bootstrap}: {what}: {e}")


def topic_state(bootstrap: str, topic: str) -> TopicState:
    """The topic's id, timestamp type and each partition's (earliest, latest) offsets."""
    from confluent_kafka import KafkaException, TopicCollection, TopicPartition

    adm = _admin_module()
    admin = _admin(bootstrap)
    try:
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic].result()
    except KafkaException as e:
        if "UNKNOWN_TOPIC" in str(e):
            msg = f"Kafka at {bootstrap}: topic {topic!r} does not exist"
            raise InputError(msg) from e
        raise _fail(bootstrap, f"cannot describe topic {topic!r}", e) from e
    parts = sorted(p.id for p in described.partitions)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            res = adm.ConfigResource(adm.ResourceType.TOPIC, topic)
            configs = admin.describe_configs([res], request_timeout=TIMEOUT_S)[res].result()
            ts_type = str(configs["message.timestamp.type"].value)
            tps = [TopicPartition(topic, p) for p in parts]
            spec = adm.OffsetSpec
            lows = admin.list_offsets({tp: spec.earliest() for tp in tps}, request_timeout=TIMEOUT_S)
            highs = admin.list_offsets({tp: spec.latest() for tp in tps}, request_timeout=TIMEOUT_S)
            offsets = {
                tp.partition: (int(lows[tp].result().offset), int(highs[hp].result().offset))
                for tp, hp in zip(sorted(lows, key=_pid), sorted(highs, key=_pid), strict=True)
            }
            return TopicState(topic, str(described.topic_id), offsets, ts_type)
        except KafkaException as e:
            # a partition's leader moving (a topic just created, a broker restarting) passes
            if _retriable(e) and time.monotonic() < deadline:
                log.info("Kafka at %s: listing the offsets of %r again: %s", bootstrap, topic, e)
                time.sleep(RETRY_S)
                continue
            raise _fail(bootstrap, f"cannot list the offsets of topic {topic!r}", e) from e


def _retriable(e: Exception) -> bool:
    """Whether the broker said "not now" (librdkafka's flag, or a partition without its leader yet)."""
    from confluent_kafka import KafkaError

    err = e.args[0] if e.args else None
    if not isinstance(err, KafkaError):
        return False
    moving = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    return bool(err.retriable()) or err.code() in moving


def _pid(tp: Any) -> int:
    return int(tp.partition)


def create_topic(bootstrap: str, topic: str, partitions: int, *, exist_ok: bool = True) -> bool:
    """Create a topic that stamps records with the broker's log-append time; whether it was created."""
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap)
    new = _admin_module().NewTopic(topic, partitions, 1, config={"message.timestamp.type": LOG_APPEND_TIME})
    try:
        admin.create_topics([new], request_timeout=TIMEOUT_S)[topic].result()
    except KafkaException as e:
        if exist_ok and "TOPIC_ALREADY_EXISTS" in str(e):
            return False
        raise _fail(bootstrap, f"cannot create topic {topic!r}", e) from e
    return True


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a topic (tests and demos start over with it)."""
    from confluent_kafka import KafkaException

    admin = _admin(bootstrap)  # held until the answer: a dropped client cancels its requests
    try:
        admin.delete_topics([topic], request_timeout=TIMEOUT_S)[topic].result()
    except KafkaException as e:
        raise _fail(bootstrap, f"cannot delete topic {topic!r}", e) from e


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    *,
    flush_every: int = 100_000,
    until_stopped: bool = False,
) -> int:
    """Send ``(key, value)`` records in order (idempotent producer: a retry never duplicates); their count.

    Records of one key go to one partition, in the order given. ``until_stopped``: an interrupt
    (SIGINT, or SIGTERM as the stages' command line turns it into an exit) ends the sending as
    a live replay's normal end: what was handed over is delivered, and counted.
    """
    from confluent_kafka import KafkaException, Producer

    # a partition's records batched over linger.ms share the broker's log-append time, and the
    # ingest reads one instant's batches one partition after the other: a short linger keeps that
    # reordering within a few ms of arrival (under load, batches still fill while others are in flight)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 2,
         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000}
    )  # fmt: skip
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    n = 0
    try:
        try:
            for key, value in records:
                while True:
                    try:
                        producer.produce(topic, value=value, key=key, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)  # the local queue is full: let deliveries drain it
                n += 1
                if n % flush_every == 0:
                    producer.poll(0)
        except (KeyboardInterrupt, SystemExit):
            if not until_stopped:
                raise
            log.info("[produce] stopped: delivering the %d records handed over", n)
        left = producer.flush(60)
    except KafkaException as e:
        raise _fail(bootstrap, f"cannot produce to {topic!r}", e) from e
    if errors or left:
        msg = f"Kafka at {bootstrap}: {len(errors)} records not delivered to {topic!r} ({left} still queued)"
        msg += f"; first error: {errors[0]}" if errors else ""
        raise InputError(msg)
    return n
