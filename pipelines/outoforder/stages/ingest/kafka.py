"""Kafka ingest stage: the records that arrived on a topic since the last run -> bronze, exactly once.

A declared source with a ``topic`` (docs/sources.md) is read in *batches*: each run reads, from
every partition, the offsets between where the previous batch ended and where the log ends now.
The driver plans and commits; Spark reads, ranks and parses. In this order:

1. **plan**: the driver asks the broker (:func:`outoforder.io.kafka.topic_state`) for the topic's
   id and every partition's earliest and latest offset. The previous batch's ends (table
   ``bronze/kafka_offsets``) are the new starts. Offsets that expired before they were read, a
   topic deleted and created again (its id changed, or its offsets went back), or partitions that
   disappeared stop the run here with the partitions and offsets named: nothing is skipped
   (the batches: :mod:`outoforder.stages.ingest.kafka_batches`).
2. **claim**: the batch's ranges go into ``bronze/kafka_offsets`` (one row per partition, a tagged
   append) before any record is read. A batch numbers its records on under its source's ordinal
   (``arrival_seq = ordinal * SEQ_PER_FILE + first_rank + rank``, ``first_rank`` the records of
   the batches before it); only a source's first batch, and one every ``SEQ_PER_FILE`` records,
   claims a new ordinal in the ingest log. A batch that was claimed but never finished (a crash)
   is the next run's batch again, with the same ranges. Of two runs that claim one batch number,
   the first claim in the table's log stands and the other stops: one ingest of a source runs at
   a time (the DAG runs one at a time).
3. **rank**: Spark's Kafka source reads exactly those ranges (``failOnDataLoss`` on, as a
   backstop), one task per partition, in offset order. The arrival order is (log-append time,
   partition, offset), a total order that a rerun derives again. This first read takes the
   records' metadata only and cuts each partition into *runs* (stretches of one log-append time,
   :func:`~outoforder.stages.ingest.tasks.record_meta`), with a few payloads for the declaration's
   check; runs never interleave, so the driver sorts the runs and gives each the number of
   records before it (:func:`_ranks`; a batch too large for the driver is ranked by Spark,
   :func:`_run_starts`), whatever the broker's clock did.
4. **read, parse and write**: the second read parses each task's records where it read them with
   the source's declaration (:func:`outoforder.stages.ingest.tasks.parse_records`), the payloads
   never shuffled and nothing staged on disk; a record's rank is its run's start plus its place
   in the run, and ``arrival_ts`` its log-append time. Delta's writer appends the rows to bronze,
   the counts observed in that write.
5. **commit**: bronze's rows, then quarantine's (read and parsed once more, when there are any),
   each in one Delta commit tagged with the batch's ingest id (a resumed run finds a commit that
   was made and skips it), then the ingest log's ``done`` row with the counts. The next batch
   starts where this one ends. A batch costs four Spark jobs, six with rejects (the claim, the
   metadata pass, bronze, the done row; quarantine and its counts).

A record's identity is its (partition, offset): two records with the same payload are two arrivals
(the producer of :func:`outoforder.io.kafka.produce` is idempotent, so its retries add none).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import ConfigError, InputError, StateError
from outoforder.io import delta, figures
from outoforder.io.conflicts import retry_on_conflict
from outoforder.io.delta import where_sql
from outoforder.io.kafka import topic_state
from outoforder.io.tables import BRONZE, INGEST_LOG, KAFKA_OFFSETS, QUARANTINE, SEQ_PER_FILE
from outoforder.sources.declaration import Declaration
from outoforder.sources.declared import DeclaredReader
from outoforder.sources.declared_checks import check_sample
from outoforder.stages.ingest import tasks
from outoforder.stages.ingest.files import (
    QUARANTINE_ROW_COLUMNS,
    bronze_options,
    identity_columns,
)
from outoforder.stages.ingest.kafka_batches import (
    Batch,
    batch_done,
    check_readable,
    offset_rows,
    plan_batch,
    stored_batch,
    write_cover_hint,
)
from outoforder.stages.ingest.plan import FileSpec, PlannedFile, claim_ordinals

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from outoforder.io.tables import Table

log = logging.getLogger(__name__)
SAMPLE = 50  # records checked against the declaration before anything is written
PRUNE_EVERY = 30  # batches between two deletions of a source's older batches' offsets
COVERS_KEPT = 30  # copies of a batch's offsets (moved coverage) kept before the older ones go
# a batch reads a backlog: fewer, larger fetches than the consumer's defaults (500 records, 1 MB)
CONSUMER = {"max.poll.records": 20_000, "max.partition.fetch.bytes": 16 << 20, "fetch.max.bytes": 64 << 20}


@dataclass(frozen=True)
class KafkaSummary:
    """What one run of the Kafka ingest did."""

    source: str
    topic: str
    batch: int
    resumed: bool
    records: int
    accepted: int
    quarantined: int
    reasons: dict[str, int]
    seconds: float

    def line(self) -> str:
        """The one-line summary of the run."""
        if not self.records:
            return f"[ingest-kafka] {self.source} <- {self.topic}: no new records"
        why = ", ".join(f"{k}={v}" for k, v in sorted(self.reasons.items())) or "none"
        again = " (resumed: an earlier run claimed it and stopped)" if self.resumed else ""
        return (
            f"[ingest-kafka] {self.source} <- {self.topic} batch {self.batch}{again}: {self.records:,} "
            f"records = {self.accepted:,} accepted + {self.quarantined:,} quarantined ({why}); "
            f"{self.seconds:.1f} s, {self.records / max(self.seconds, 1e-9):,.0f} records/s"
        )


def kafka_declaration(settings: Settings, source: str) -> Declaration:
    """The declaration of a Kafka source; fails naming the declared ones otherwise."""
    decl = settings.sources.get(source)
    if decl is None or not decl.topic:
        topics = sorted(n for n, d in settings.sources.items() if d.topic)
        known = ", ".join(topics) or 'none (add topic = "..." to a [sources.<name>] table)'
        msg = f"{source!r} is not a declared Kafka source; declared ones: {known}"
        raise ConfigError(msg)
    return decl


def _cover(spark: SparkSession, settings: Settings, newest: Batch, listed_at_us: int) -> None:
    """Nothing new since ``newest``: move its listing time on, so that coverage follows the clock.

    The log ends have not moved since the batch was planned, so every record appended before
    ``listed_at_us`` is in it or before it. No empty batch is added: a copy of the batch's rows with
    the new time is appended (one Spark job), and every :data:`COVERS_KEPT` copies the older ones
    are deleted (after the append: a crash in between leaves copies, never none).
    """
    moved = replace(newest, listed_at_us=listed_at_us)
    lake = settings.lake_root
    delta.append(offset_rows(spark, moved), KAFKA_OFFSETS, lake, f"cover|{newest.ingest_id}")
    if newest.copies + 1 >= COVERS_KEPT:
        cond = where_sql({"source": newest.source, "batch": newest.number})
        _delete_offsets(spark, lake, f"{cond} AND listed_at_us < {listed_at_us}")
    write_cover_hint(settings, newest.source, listed_at_us)
    figures.record(BRONZE.name, source=newest.source, rows=0, end_us=listed_at_us)  # covered, nothing new


def _delete_offsets(spark: SparkSession, lake: str, cond: str) -> None:
    spark.sql(f"DELETE FROM {delta.table_sql(KAFKA_OFFSETS, lake)} WHERE {cond}").collect()


def _claim(spark: SparkSession, settings: Settings, batch: Batch, now: int) -> Batch:
    """Record the batch's ranges (a tagged append, before any record is read); the batch stored.

    A batch that starts a new ordinal claims it in the ingest log first (a source's first batch,
    and every ``SEQ_PER_FILE`` records). Of two runs that planned the same batch number, the first
    claim in the log stands (:func:`~outoforder.stages.ingest.kafka_batches.stored_batch`); the
    other run stops before it reads anything. Every :data:`PRUNE_EVERY` batches the source's
    older batches' rows go.
    """
    from outoforder.io import deltalog

    lake = settings.lake_root
    if batch.records and batch.ordinal < 0:
        claim = PlannedFile(0, FileSpec(batch.shown, "kafka", batch.source), batch.shown, key=batch.key)
        claim.size = batch.records
        claim_ordinals(settings, [claim], now)
        batch = replace(batch, ordinal=claim.ordinal, first_rank=0)
    bronze = deltalog.newest_version(BRONZE.path(lake), settings.storage)
    batch = replace(batch, bronze_after=-1 if bronze is None else bronze)
    delta.append(offset_rows(spark, batch), KAFKA_OFFSETS, lake, batch.ingest_id)
    stored = stored_batch(settings, batch.source, batch.number)
    if stored is None:
        msg = f"{batch.shown}: its offsets were claimed but cannot be read back from {KAFKA_OFFSETS.name}"
        raise StateError(msg)
    if stored.ingest_id != batch.ingest_id:
        msg = (
            f"{batch.shown}: another ingest of source {batch.source!r} claimed this batch first; one "
            "ingest of a source runs at a time (the ingest_kafka DAG runs one at a time), so this run "
            "stops before reading anything"
        )
        raise StateError(msg)
    if batch.number and batch.number % PRUNE_EVERY == 0:
        _delete_offsets(spark, lake, f"{where_sql({'source': batch.source})} AND batch < {batch.number - 1}")
    return stored


def _read(spark: SparkSession, settings: Settings, batch: Batch) -> DataFrame:
    from pyspark.sql import functions as F

    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap)
        .option("assign", json.dumps({batch.topic: sorted(batch.ranges)}))
        .option("startingOffsets", batch.offsets_json(0))
        .option("endingOffsets", batch.offsets_json(1))
        .option("failOnDataLoss", "true")
        .option("kafkaConsumer.pollTimeoutMs", str(settings.kafka.poll_timeout_ms))
        .options(**{f"kafka.{k}": str(v) for k, v in CONSUMER.items()})
        .load()
        .select("partition", "offset", F.unix_micros("timestamp").alias("ts_us"), "value")
    )


def _reader(decl: Declaration, sample: list[str], where: str) -> DeclaredReader:
    """The topic's reader; a sample that does not fit is said, not a stop.

    A file that does not fit waits (or goes to ``rejected/``) untouched; a topic's records cannot be
    set aside, and stopping would wedge every later record behind them. So they are quarantined,
    each with its reason and raw payload, and the ingest goes on.
    """
    reader = DeclaredReader(decl, decl.columns or decl.columns_used())
    try:
        check_sample(reader, sample, where)
    except InputError as e:
        log.warning(
            "[ingest-kafka] %s; the batch's records that do not fit are quarantined, the topic goes on", e
        )
    return reader


BROADCAST_RUNS = 2_000_000  # runs joined to the records by broadcast up to this many (32 B each)
# a batch of up to this many records is ranked on the driver: its runs (at most one per record,
# 24 B each) come back from the one metadata pass
DRIVER_RANKS = 2_000_000


def _ranks(
    spark: SparkSession, raw: DataFrame, batch: Batch
) -> tuple[DataFrame | tasks.RunStarts, list[str]]:
    """Where each run starts in the batch, and the first payloads: one pass over the batch's metadata.

    The tasks cut their records into runs (:func:`~outoforder.stages.ingest.tasks.record_meta`) and
    keep a few payloads for the declaration's check; the driver sorts the runs by (log-append time,
    partition, first offset), the batch's arrival order in stretches, and counts the records
    before each: per partition, its runs (sorted) and those counts, which reach the parsing tasks
    with the plan. A batch of more than :data:`DRIVER_RANKS` records is ranked by Spark instead
    (:func:`_run_starts`: a DataFrame of (partition, run, before) to join).
    """
    import pyarrow.compute as pc
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    if batch.records > DRIVER_RANKS:
        rows = raw.select("value").limit(SAMPLE).collect()
        joined, n_runs = _run_starts(spark, raw, batch)
        return (F.broadcast(joined) if n_runs <= BROADCAST_RUNS else joined), [_text(v) for (v,) in rows]

    def meta(it: Any) -> Any:
        return tasks.record_meta(it, SAMPLE)

    got = raw.mapInArrow(meta, from_arrow_schema(tasks.META_SCHEMA)).toArrow()
    starts, total = tasks.rank_runs(got)
    if total != batch.records:
        msg = f"{batch.shown}: read {total:,} records where the offsets hold {batch.records:,}"
        raise StateError(msg)
    picked = got.filter(pc.equal(got.column("count"), 0))
    picked = picked.sort_by([("partition", "ascending"), ("run", "ascending")])
    return starts, [_text(v) for v in picked.column("payload").to_pylist()[:SAMPLE]]


def _text(value: bytes | None) -> str:
    return bytes(value or b"").decode("utf-8", "replace")


def _run_starts(spark: SparkSession, raw: DataFrame, batch: Batch) -> tuple[DataFrame, int]:
    """((partition, run, before), how many runs): a record's number in the batch is ``before + place + 1``.

    The first pass over the batch reads the records' (partition, offset, log-append time) only,
    which its tasks cut into runs (:func:`~outoforder.stages.ingest.tasks.record_runs`). The runs,
    sorted by (log-append time, partition, first offset), are the batch's arrival order in
    stretches; a run's first record comes after every record of the runs before it. Each task of
    the sort counts its share and the driver adds up one total per task.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    def before(it: Any) -> Any:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return tasks.runs_before(it, ctx.partitionId() if ctx else 0)

    # checkpointed before the sort, whose sampling job would read the batch once more
    runs = (
        raw.select("partition", "offset", "ts_us")
        .mapInArrow(tasks.record_runs, from_arrow_schema(tasks.RUN_SCHEMA))
        .localCheckpoint()
    )
    counted = (
        runs.orderBy("arrival_ts", "partition", "run")
        .mapInArrow(before, from_arrow_schema(tasks.RUN_BEFORE_SCHEMA))
        .localCheckpoint()
    )
    per_task = counted.groupBy("task").agg(F.sum("count").alias("n"), F.count("*").alias("runs")).collect()
    carried, total = [], 0
    for row in sorted(per_task, key=lambda r: int(r["task"])):  # one row per task of the sort
        carried.append((int(row["task"]), total))
        total += int(row["n"])
    if total != batch.records:
        msg = f"{batch.shown}: read {total:,} records where the offsets hold {batch.records:,}"
        raise StateError(msg)
    offsets = spark.createDataFrame(carried, "task long, carried long")
    starts = counted.join(F.broadcast(offsets), "task").select(
        "partition", "run", (F.col("carried") + F.col("within")).alias("before")
    )
    return starts, sum(int(r["runs"]) for r in per_task)


@retry_on_conflict
def ingest_topic(
    spark: SparkSession, settings: Settings, source: str, now_us: int | None = None
) -> KafkaSummary:
    """Ingest the records of ``source``'s topic that arrived since the last run (module docstring)."""
    t0 = time.monotonic()
    decl = kafka_declaration(settings, source)
    lake = settings.lake_root
    for table in (BRONZE, QUARANTINE, INGEST_LOG, KAFKA_OFFSETS):
        delta.ensure(spark, table, lake)
    newest = stored_batch(settings, source)
    resumed = newest is not None and newest.records > 0 and not batch_done(settings, newest.ingest_id)
    listed_at = int(datetime.now(UTC).timestamp() * 1_000_000)
    now = now_us if now_us is not None else listed_at
    state = topic_state(settings.kafka.bootstrap, decl.topic)
    if resumed and newest is not None:
        check_readable(newest, state)
        batch = newest
    else:
        planned = plan_batch(newest, source, state, listed_at)
        if newest is not None and not planned.records:
            _cover(spark, settings, newest, listed_at)
            return KafkaSummary(source, decl.topic, newest.number, False, 0, 0, 0, {}, time.monotonic() - t0)
        batch = _claim(spark, settings, planned, now)
    if not batch.records:
        return KafkaSummary(source, decl.topic, batch.number, False, 0, 0, 0, {}, time.monotonic() - t0)
    log.info(
        "[ingest-kafka] %s <- %s batch %d: %s records in %s",
        source, decl.topic, batch.number, f"{batch.records:,}",
        ", ".join(f"p{p}[{s},{e})" for p, (s, e) in sorted(batch.ranges.items()) if s < e),
    )  # fmt: skip
    return _ingest(spark, settings, decl, batch, resumed, now, t0)


def _ingest(
    spark: SparkSession,
    settings: Settings,
    decl: Declaration,
    batch: Batch,
    resumed: bool,
    now: int,
    t0: float,
) -> KafkaSummary:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    lake = settings.lake_root
    raw = _read(spark, settings, batch)
    lo, hi = settings.ingest.plausible_range(decl.name)
    lines = settings.ingest.batch_rows

    # Two passes over the batch, no shuffle of its payloads: the first ranks the runs from the
    # records' metadata; in the second a task reads a topic partition in offset order, parses its
    # records where it read them, and Delta's writer appends them to bronze, numbered. The counts
    # are observed in that write; the rejects, if any, are read and parsed again.
    marks = [("", t0)]
    starts, sample = _ranks(spark, raw, batch)
    reader = _reader(decl, sample, batch.shown).spec()
    marks.append(("plan and rank", time.monotonic()))

    if isinstance(starts, dict):  # ranked on the driver: the parsing tasks look their runs up

        def numbered_here(it: Any) -> Any:
            return tasks.numbered_records(it, reader, lo, hi, lines, starts)

        parsed = raw.mapInArrow(numbered_here, from_arrow_schema(tasks.NUMBERED_SCHEMA))
    else:

        def parse(it: Any) -> Any:
            return tasks.parse_records(it, reader, lo, hi, lines)

        parsed = raw.mapInArrow(parse, from_arrow_schema(tasks.RECORD_SCHEMA)).join(
            starts, ["partition", "run"]
        )
    numbered = parsed.withColumn("line_no", F.col("before") + F.col("place") + 1).withColumn(
        "arrival_seq", F.lit(batch.ordinal * SEQ_PER_FILE + batch.first_rank) + F.col("line_no")
    )
    ident = identity_columns(batch.source, batch.ingest_id, batch.shown)
    tally = Observation(f"kafka_{uuid.uuid4().hex}")
    row = F.col("kind") == "row"
    observed = numbered.observe(
        tally,
        F.count_if(row).alias("accepted"),
        F.count_if(F.col("kind") == "reject").alias("quarantined"),
        F.min(F.when(row, F.col("arrival_seq"))).alias("first_seq"),
        F.max(F.when(row, F.col("arrival_seq"))).alias("last_seq"),
    )
    quarantined: int | None
    if resumed and _wrote(spark, settings, BRONZE, batch):  # a rerun after a crash: bronze has the rows
        rows = delta.read(spark, BRONZE, lake).where(
            (F.col("source") == batch.source) & (F.col("ingest_id") == batch.ingest_id)
        )
        top = rows.agg(F.count("*"), F.min("arrival_seq"), F.max("arrival_seq")).first()
        assert top is not None  # an aggregate without grouping has one row
        accepted, quarantined, seqs = int(top[0]), None, (top[1], top[2])
    else:
        bronze = observed.where(row).select(*ident, "*").select(*[f.name for f in BRONZE.schema])
        delta.append(bronze, BRONZE, lake, batch.ingest_id, options=bronze_options(settings))
        got = tally.get
        accepted, quarantined = int(got["accepted"]), int(got["quarantined"])
        seqs = (got["first_seq"], got["last_seq"])
    marks.append(("read, parse and bronze", time.monotonic()))
    reasons: dict[str, int] = {}
    if quarantined is None or quarantined:
        rejects = numbered.where("kind = 'reject'").select(*ident, *QUARANTINE_ROW_COLUMNS)
        reasons = _quarantine(spark, settings, rejects, batch, resumed)
        quarantined = sum(reasons.values())
    blank = batch.records - accepted - quarantined  # empty payloads (tombstones)
    first_seq, last_seq = seqs if accepted else (None, None)
    done = [
        (batch.ingest_id, "done", batch.ordinal, batch.source, batch.shown, "", batch.records, decl.name,
         batch.records, 0, blank, accepted + quarantined, accepted, quarantined, first_seq, last_seq, now)
    ]  # fmt: skip
    delta.append(spark.createDataFrame(done, INGEST_LOG.schema), INGEST_LOG, lake, batch.ingest_id)
    write_cover_hint(settings, batch.source, batch.listed_at_us)
    figures.record(
        BRONZE.name, source=batch.source, topic=batch.topic, batch=batch.number, records=batch.records,
        rows=accepted, quarantined=quarantined, end_us=batch.listed_at_us,
    )  # fmt: skip
    marks.append(("quarantine and log", time.monotonic()))
    log.info(
        "[ingest-kafka] %s: %s",
        batch.shown, ", ".join(f"{name} {t - before:.1f} s" for (_, before), (name, t) in pairwise(marks)),
    )  # fmt: skip
    return KafkaSummary(
        batch.source, batch.topic, batch.number, resumed, batch.records, accepted, quarantined, reasons,
        time.monotonic() - t0,
    )  # fmt: skip


def _wrote(spark: SparkSession, settings: Settings, table: Table, batch: Batch) -> bool:
    """Whether an earlier attempt of ``batch`` committed its rows to ``table`` (a resumed run asks).

    Its commit is tagged with the batch's ingest id and is newer than the claim's view of bronze;
    where the claim did not record it (older rows), the table's rows are asked.
    """
    from pyspark.sql import functions as F

    from outoforder.io import deltalog

    if table is BRONZE and batch.bronze_after >= 0:
        path = table.path(settings.lake_root)
        return bool(deltalog.tagged_commits(path, batch.ingest_id, batch.bronze_after, settings.storage))
    rows = delta.read(spark, table, settings.lake_root).where(
        (F.col("source") == batch.source) & (F.col("ingest_id") == batch.ingest_id)
    )
    return bool(rows.limit(1).count())


def _quarantine(
    spark: SparkSession, settings: Settings, rejects: DataFrame, batch: Batch, resumed: bool
) -> dict[str, int]:
    """The batch's rejects appended to quarantine once (tagged); their counts by reason.

    The reasons are observed in the write itself (a list of a few bytes per reject, counted on the
    driver); a resumed run whose quarantine commit was made reads them back instead.
    """
    from collections import Counter

    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    lake = settings.lake_root
    if resumed and _wrote(spark, settings, QUARANTINE, batch):
        mine = delta.read(spark, QUARANTINE, lake).where(
            (F.col("source") == batch.source) & (F.col("ingest_id") == batch.ingest_id)
        )
        return {r["reason"]: int(r["count"]) for r in mine.groupBy("reason").count().collect()}
    tally = Observation(f"quarantine_{uuid.uuid4().hex}")
    delta.append(
        rejects.observe(tally, F.collect_list("reason").alias("reasons")), QUARANTINE, lake, batch.ingest_id
    )
    return dict(Counter(str(r) for r in tally.get["reasons"]))
