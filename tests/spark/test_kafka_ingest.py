"""The Kafka ingest against a real broker (infra/kafka.sh, started by the test on free ports).

- A disordered two-stream topic with three partitions, produced and ingested in batches: every
  record lands once, in bronze or (malformed) in quarantine with a reason naming its partition and
  offset; the arrival order is (log-append time, partition, offset); the ingest log balances; the
  stream join then runs over it and is validated.
- A crash between reading and committing, at each commit: the rerun loses and duplicates nothing.
- A topic deleted and created again, and records deleted before they were read: the run stops
  naming the partitions and offsets, and writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json
import random
import time
import uuid

import pytest
from pyspark.sql import functions as F

from outoforder.errors import EXIT_NOTHING_YET, ConfigError, StateError
from outoforder.io import delta
from outoforder.io import kafka as kafka_io
from outoforder.io.tables import BRONZE, INGEST_LOG, JOIN_RESULTS, KAFKA_OFFSETS, QUARANTINE, SEQ_PER_FILE
from outoforder.quality.bronze import validate_bronze
from outoforder.stages.cli import main
from outoforder.stages.ingest import kafka as stage
from outoforder.stages.ingest import kafka_batches as batches
from tests import services

pytestmark = [pytest.mark.spark, pytest.mark.delta]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with services.kafka(tmp_path_factory.mktemp("kafka")) as env:
        yield env["OOO_KAFKA_BOOTSTRAP"]


def declare(settings, tmp_path, topic, bootstrap):
    cfg = tmp_path / "kafka.toml"
    cfg.write_text(
        f'[lake]\nroot = "{settings.lake_root}"\n[quality]\non_violation = "warn"\n'
        f'[kafka]\nbootstrap = "{bootstrap}"\ncover_wait_s = 3\ncover_poll_s = 1\n'
        f'[sources.yard]\ntopic = "{topic}"\nformat = "jsonl"\nkey = "tag"\n'
        'event_time = { column = "t_ms", unit = "ms" }\n'
        'stream = { column = "kind", values = ["forklift", "picker"] }\n'
        'values = { x = "x", y = "y" }\nattrs = ["id"]\n'
    )
    from outoforder.config import load_settings

    mine = load_settings(cfg)
    return cfg, dataclasses.replace(mine, quality=settings.quality)


def records(n, seed, first_id=0, bad_every=0):
    """(key, payload) of a disordered stream: event times up to 2 s behind their send order."""
    rng = random.Random(seed)
    t0_ms = int(time.time() * 1000) - 20_000  # the records' event times: about now
    out = []
    for i in range(first_id, first_id + n):
        t_ms = t0_ms + i * 10 - rng.choice([0, 0, 0, 40, 300, 2000])
        body = {"id": i, "kind": rng.choice(["forklift", "picker"]), "tag": f"t{i % 7}", "t_ms": t_ms,
                "x": rng.uniform(0, 20), "y": rng.uniform(0, 20)}  # fmt: skip
        value = json.dumps(body).encode()
        if bad_every and i % bad_every == 3:
            value = b"{not json" if (i // bad_every) % 2 else json.dumps({**body, "x": "n/a"}).encode()
        out.append((body["tag"].encode(), value))
    return out


def run(cfg, *args, expect=0):  # as in test_declared_ingest.py (test files do not import each other)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["--config", str(cfg), *map(str, args)])
    assert rc == expect, (out.getvalue() + err.getvalue())[-4000:]
    return out.getvalue() + err.getvalue()


def table(spark, settings, t):
    return delta.read(spark, t, settings.lake_root).where(F.col("source") == "yard")


def test_a_disordered_topic_is_ingested_in_batches_exactly_once_and_joined(
    spark, settings, tmp_path, broker, monkeypatch
):
    topic = f"yard-{uuid.uuid4().hex[:8]}"
    cfg, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 3)
    join = ("--source", "yard", "--r-streams", "forklift", "--s-streams", "picker", "--theta", "3")
    # live mode's first minute: a stage's run before the ingest's first batch has nothing to do
    out = run(cfg, "join-stream", *join, "--start", 1, "--end", 2)
    assert "the ingest has delivered nothing from the topic of 'yard' yet" in out
    # ... and a scheduled run is skipped, saying so (exit status 5: the task is skipped)
    out = run(cfg, "join-stream", *join, "--start", 1, "--end", 2, "--catch-up", expect=EXIT_NOTHING_YET)
    assert "nothing to do yet: the ingest has delivered nothing from the topic of 'yard' yet" in out
    first = records(600, seed=1, bad_every=50)
    kafka_io.produce(broker, topic, first)
    out = run(cfg, "ingest-kafka", "--source", "yard")
    assert "batch 0: 600 records = 588 accepted + 12 quarantined (not_json=6, not_numeric=6)" in out
    kafka_io.produce(broker, topic, records(400, seed=2, first_id=600))
    monkeypatch.setattr(stage, "DRIVER_RANKS", 100)  # this batch is ranked by Spark, not on the driver
    s2 = stage.ingest_topic(spark, mine, "yard")
    monkeypatch.undo()
    assert (s2.batch, s2.records, s2.accepted, s2.quarantined) == (1, 400, 400, 0)
    covered = batches.covered_until(mine, "yard")
    nothing = stage.ingest_topic(spark, mine, "yard")  # nothing new
    assert nothing.records == 0 and nothing.line() == f"[ingest-kafka] yard <- {topic}: no new records"
    # ... adds no empty batch, and moves the coverage on to its own listing time
    offsets = table(spark, settings, KAFKA_OFFSETS).select("batch").distinct().collect()
    assert sorted(r["batch"] for r in offsets) == [0, 1]
    assert batches.covered_until(mine, "yard") > covered
    assert batches.read_cover_hint(mine, "yard") == batches.covered_until(mine, "yard")  # the hint follows

    bronze = table(spark, settings, BRONZE)
    ids = [int(r["id"]) for r in bronze.select(F.col("attrs")["id"].alias("id")).collect()]
    assert len(ids) == len(set(ids)) == 988
    q = table(spark, settings, QUARANTINE).collect()
    assert len(q) == 12
    assert all("partition " in r["detail"] and "offset " in r["detail"] for r in q)
    assert {r["detail"].split(" (")[0] for r in q if r["reason"] == "not_numeric"} == {"column 'x': 'n/a'"}
    # arrival order: (log-append time, partition, offset) -> arrival_seq, strictly increasing
    rows = bronze.select("arrival_seq", "arrival_ts").orderBy("arrival_seq").collect()
    assert all(a["arrival_ts"] <= b["arrival_ts"] for a, b in itertools.pairwise(rows))
    lag = bronze.agg(F.max(F.col("arrival_ts") - F.col("event_ts"))).first()[0]
    assert 0 < lag < 600_000_000  # event times in ms, arrivals in µs: both on one clock
    log_rows = table(spark, settings, INGEST_LOG).where("status = 'done'").collect()
    assert sorted(r["lines"] for r in log_rows) == [400, 600]
    (ordinal,) = {r["file_ordinal"] for r in log_rows}  # the second batch numbers on under the first's
    assert max(r["arrival_seq_first"] for r in log_rows) == ordinal * SEQ_PER_FILE + 601
    assert all(r["lines"] == r["blank_lines"] + r["rows_accepted"] + r["rows_quarantined"] for r in log_rows)
    run(cfg, "validate-bronze")

    # the stream stages run over what the ingest covers, and not beyond it
    out = run(cfg, "join-stream", *join)  # one pass up to what the ingest covers
    assert "[join-stream]" in out
    assert delta.read(spark, JOIN_RESULTS, settings.lake_root).count() > 0
    covered = batches.covered_until(mine, "yard")
    out = run(cfg, "validate-join", *join, "--until", covered)
    assert "recall" in out
    far = covered + 3_600_000_000
    out = run(cfg, "join-stream", *join, "--end", far)
    assert "waiting for the ingest to cover" in out  # for kafka.cover_wait_s, then what is covered
    assert "nothing new ingested" in out


JOBS_PER_BATCH = 6  # a Kafka ingest batch, rejects and all (issue 73; 4 without rejects, 5 with)
JOBS_PER_BRONZE_CHECK = 2  # validate-bronze of a run's interval


def test_a_batch_costs_a_handful_of_spark_jobs_and_commits(spark, settings, tmp_path, broker):
    # counted on a warm session, after the source's first batch (which creates its tables)
    from benchmarks.reliability import commits

    topic = f"budget-{uuid.uuid4().hex[:8]}"
    _, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 3)
    kafka_io.produce(broker, topic, records(200, seed=7))
    stage.ingest_topic(spark, mine, "yard")
    sc = spark.sparkContext
    for i, (n, bad_every) in enumerate([(300, 0), (3_000, 40), (300, 0)]):
        kafka_io.produce(
            broker, topic, records(n, seed=8 + i, first_id=200 + 10_000 * i, bad_every=bad_every)
        )
        before, started_us = commits(settings.lake_root), time.time_ns() // 1000
        sc.setJobGroup(f"kafka-batch-{i}", "a batch")
        summary = stage.ingest_topic(spark, mine, "yard")
        sc.setJobGroup("", "")
        jobs = len(sc.statusTracker().getJobIdsForGroup(f"kafka-batch-{i}"))
        assert summary.records == n and (summary.quarantined > 0) == (bad_every > 0)
        assert jobs <= JOBS_PER_BATCH, (i, jobs)
        assert commits(settings.lake_root) - before <= 3 + (bad_every > 0)  # offsets, bronze, log, quarantine
        # the DAG's bronze check of the batch: its rows fetched once, the rest read on the driver
        sc.setJobGroup(f"bronze-check-{i}", "a check")
        results = validate_bronze(spark, mine, since_us=started_us)
        sc.setJobGroup("", "")
        assert [r.success for r in results] == [True, True]
        assert len(sc.statusTracker().getJobIdsForGroup(f"bronze-check-{i}")) <= JOBS_PER_BRONZE_CHECK


def kafka_pools(spark):
    """The JVM's Kafka pools (private fields, read by reflection): consumers, fetched-data entries
    held, fetched-data entries ever created."""
    jvm = spark.sparkContext._jvm
    cls = jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer$")
    pools = []
    for name in ("consumerPool", "fetchedDataPool"):
        field = cls.getDeclaredField(name)
        field.setAccessible(True)
        pools.append(field.get(None))
    return pools[0].size(), pools[1].numTotal(), pools[1].numCreated()


def test_a_batchs_consumers_and_their_fetched_records_leave_the_driver_soon_after(
    spark, settings, tmp_path, broker
):
    # A batch read has a group id of its own: no later read borrows its consumers again, and a
    # pooled consumer keeps the records it fetched past the read's end in the heap. Left for Spark's
    # default 5 minutes, a live stream's pools held minutes of the topic.
    topic = f"pools-{uuid.uuid4().hex[:8]}"
    _, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 3)
    kafka_io.produce(broker, topic, records(500, seed=11))
    created = kafka_pools(spark)[2]
    stage.ingest_topic(spark, mine, "yard")
    assert kafka_pools(spark)[2] > created  # the read fetched through the pools
    deadline = time.monotonic() + 60
    while kafka_pools(spark)[:2] != (0, 0) and time.monotonic() < deadline:
        time.sleep(1)
    assert kafka_pools(spark)[:2] == (0, 0)


def test_of_two_runs_claiming_one_batch_the_first_stands_and_idle_covers_stay_few(
    spark, settings, tmp_path, broker, monkeypatch
):
    topic = f"race-{uuid.uuid4().hex[:8]}"
    _, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 2)
    kafka_io.produce(broker, topic, records(100, seed=9))
    state = kafka_io.topic_state(broker, topic)
    first = batches.plan_batch(None, "yard", state, 1_000)
    for t in (BRONZE, QUARANTINE, INGEST_LOG, KAFKA_OFFSETS):
        delta.ensure(spark, t, settings.lake_root)
    assert stage._claim(spark, mine, first, 1_000) == dataclasses.replace(first, ordinal=0, bronze_after=0)
    # a second run planned the same number a moment later, with the log grown meanwhile
    kafka_io.produce(broker, topic, records(10, seed=10, first_id=100))
    later = batches.plan_batch(None, "yard", kafka_io.topic_state(broker, topic), 2_000)
    assert later.number == first.number and later.ingest_id != first.ingest_id
    with pytest.raises(StateError, match="claimed this batch first"):
        stage._claim(spark, mine, later, 2_000)
    assert batches.stored_batch(mine, "yard").ingest_id == first.ingest_id  # for every reader
    s = stage.ingest_topic(spark, mine, "yard")  # the first claim's batch, resumed: its ranges
    assert (s.batch, s.records, s.resumed) == (0, 100, True)

    monkeypatch.setattr(stage, "COVERS_KEPT", 3)
    assert stage.ingest_topic(spark, mine, "yard").records == 10
    for _ in range(5):  # idle runs move the coverage on; copies of the batch's rows stay few
        assert stage.ingest_topic(spark, mine, "yard").records == 0
        assert batches.stored_batch(mine, "yard").copies < 3
    assert batches.covered_until(mine, "yard") == batches.read_cover_hint(mine, "yard")


@pytest.mark.parametrize("crash_at", ["bronze", "quarantine", "done"])
def test_a_crash_between_reading_and_committing_loses_and_duplicates_nothing(
    spark, settings, tmp_path, broker, monkeypatch, crash_at
):
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    _, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 2)
    kafka_io.produce(broker, topic, records(300, seed=3, bad_every=40))
    real_append = delta.append
    dies = {"bronze": BRONZE, "quarantine": QUARANTINE, "done": INGEST_LOG}[crash_at]

    def append(df, t, *a, **k):
        if t is dies:
            raise RuntimeError("crash")
        return real_append(df, t, *a, **k)

    monkeypatch.setattr(delta, "append", append)
    with pytest.raises(RuntimeError, match="crash"):
        stage.ingest_topic(spark, mine, "yard")
    monkeypatch.undo()
    kafka_io.produce(broker, topic, records(50, seed=4, first_id=300))  # arrives meanwhile
    again = stage.ingest_topic(spark, mine, "yard")
    assert (again.batch, again.resumed, again.records) == (0, True, 300)
    assert (again.accepted, again.quarantined) == (292, 8)  # counted again where a commit was made
    assert stage.ingest_topic(spark, mine, "yard").records == 50
    got = [int(r[0]) for r in table(spark, settings, BRONZE).select(F.col("attrs")["id"]).collect()]
    quarantined = table(spark, settings, QUARANTINE).count()
    assert len(got) == len(set(got))
    assert len(got) + quarantined == 350
    assert quarantined == 8


def test_a_recreated_topic_and_expired_offsets_stop_the_run_naming_them(spark, settings, tmp_path, broker):
    from confluent_kafka import TopicPartition

    topic = f"gone-{uuid.uuid4().hex[:8]}"
    _, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 2)
    kafka_io.produce(broker, topic, records(100, seed=5))
    stage.ingest_topic(spark, mine, "yard")
    kafka_io.produce(broker, topic, records(100, seed=6, first_id=100))
    admin = kafka_io._admin(broker)
    ends = kafka_io.topic_state(broker, topic).offsets
    fut = admin.delete_records([TopicPartition(topic, 0, ends[0][1])])
    for f in fut.values():
        f.result()
    before = table(spark, settings, BRONZE).count()
    with pytest.raises(StateError, match=r"expired before they were ingested.*partition 0: \[\d+, \d+\)"):
        stage.ingest_topic(spark, mine, "yard")
    assert table(spark, settings, BRONZE).count() == before

    kafka_io.delete_topic(broker, topic)
    # the broker deletes a topic in the background: created again once it has (seconds on a busy
    # machine; 10 s were not always enough beside the other test runs)
    deadline, created, described = time.monotonic() + 120, False, False
    while not described and time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if not created:
                created = kafka_io.create_topic(broker, topic, 2, exist_ok=False)
            kafka_io.topic_state(broker, topic)  # and its metadata is served (as the ingest asks)
            described = True
        if not described:
            time.sleep(0.5)
    assert described, f"the broker did not serve {topic} created again within 120 s (created: {created})"
    with pytest.raises(StateError, match=r"deleted and created again .*partition 0 offset \d+"):
        stage.ingest_topic(spark, mine, "yard")
    assert table(spark, settings, BRONZE).count() == before


def test_a_topic_stamped_with_the_producers_time_is_refused(spark, settings, tmp_path, broker):
    topic = f"ct-{uuid.uuid4().hex[:8]}"
    _, mine = declare(settings, tmp_path, topic, broker)
    admin = kafka_io._admin(broker)
    admin.create_topics([kafka_io._admin_module().NewTopic(topic, 1, 1)])[topic].result()
    with pytest.raises(ConfigError, match=r"message\.timestamp\.type=LogAppendTime"):
        stage.ingest_topic(spark, mine, "yard")


def test_produce_replays_a_bronze_source_that_its_printed_declaration_reads_back(
    spark, settings, tmp_path, broker
):
    topic = f"yard-{uuid.uuid4().hex[:8]}"
    cfg, mine = declare(settings, tmp_path, topic, broker)
    kafka_io.create_topic(broker, topic, 3)
    kafka_io.produce(broker, topic, records(300, seed=5))
    stage.ingest_topic(spark, mine, "yard")

    back = f"back-{uuid.uuid4().hex[:8]}"
    out = run(cfg, "produce", "--source", "yard", "--topic", back, "--partitions", 2, "--name", "back")
    assert f"300 records into '{back}'" in out
    declaration = out.split("read it back with this in your config:\n", 1)[1].strip()
    assert declaration.startswith("[sources.back]") and 'attrs = ["id"]' in declaration
    cfg2 = tmp_path / "back.toml"
    cfg2.write_text(cfg.read_text() + "\n" + declaration + "\n")
    out = run(cfg2, "ingest-kafka", "--source", "back")
    assert "batch 0: 300 records = 300 accepted + 0 quarantined" in out

    def rows(source):
        df = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == source)
        got = df.select(
            "stream", "key", "event_ts", "x", "y", F.col("attrs")["id"].alias("id"), "arrival_seq"
        )
        return sorted(tuple(r) for r in got.collect())

    original, replayed = rows("yard"), rows("back")
    assert [r[:6] for r in original] == [r[:6] for r in replayed]  # same rows, values and attributes

    # a key's records keep their arrival order (one key, one partition; partitions may interleave)
    def order(rs):
        by_key = {}
        for r in sorted(rs, key=lambda r: r[6]):
            by_key.setdefault(r[1], []).append(r[5])
        return by_key

    assert order(original) == order(replayed)


def test_a_stopped_live_replay_delivers_and_counts_what_it_handed_over(broker):
    # live mode's stop is a SIGTERM to the replay: what was sent must be delivered and counted
    # (the live benchmark checks records sent = bronze accepted + quarantined)
    def interrupted(n):
        yield from records(n, seed=5)
        raise KeyboardInterrupt

    topic = f"stopped-{uuid.uuid4().hex[:8]}"
    kafka_io.create_topic(broker, topic, 2)
    assert kafka_io.produce(broker, topic, interrupted(40), until_stopped=True) == 40
    state = kafka_io.topic_state(broker, topic)
    assert sum(hi - lo for lo, hi in state.offsets.values()) == 40
    with pytest.raises(KeyboardInterrupt):  # anywhere else an interrupt is an interrupt
        kafka_io.produce(broker, topic, interrupted(3))
