"""The batches of a Kafka source: planned from the broker's offsets, stored, and how far they cover.

A batch reads, from every partition, the offsets between where the previous batch ended and where
the log ended when the batch was planned (:func:`plan_batch`, which first checks that the broker
still holds them: :func:`check_readable`). Batches are stored in ``bronze/kafka_offsets``, one row
per partition (:func:`offset_rows`, :func:`stored_batch`). The newest committed batch's listing
time is how far bronze covers the source (:func:`covered_until`); the stream stages wait on it
(:func:`wait_covered`), helped by a small hint file the ingest leaves after each commit. The
ingest itself is :mod:`outoforder.stages.ingest.kafka`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from outoforder.config import Settings
from outoforder.errors import ConfigError, StateError
from outoforder.io import status as status_files
from outoforder.io.kafka import LOG_APPEND_TIME, TopicState
from outoforder.io.tables import KAFKA_OFFSETS, SEQ_PER_FILE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
HINT_POLLS = 10  # a stream stage waiting on the coverage hint still looks at bronze every so many polls


@dataclass(frozen=True)
class Batch:
    """One batch of a topic: ``ranges[p] = (start, end)``, the offsets it reads per partition."""

    source: str
    number: int
    topic: str
    topic_id: str
    ranges: dict[int, tuple[int, int]]
    listed_at_us: int
    ordinal: int = -1  # the ingest log's ordinal its arrival_seq counts under (-1: a new one is claimed)
    first_rank: int = 0  # records of the earlier batches counted under the same ordinal
    bronze_after: int = -1  # bronze's newest version at the claim (a resumed run looks after it)
    copies: int = field(default=1, compare=False)  # row sets stored (its claim and the covers after it)

    @property
    def records(self) -> int:
        """How many records the ranges hold."""
        return sum(e - s for s, e in self.ranges.values())

    @property
    def key(self) -> str:
        """What identifies the batch's content, as a file's hash does a file's: its number and ranges."""
        text = json.dumps([self.topic, self.topic_id, sorted(self.ranges.items())])
        return f"kafka-{self.number}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    @property
    def ingest_id(self) -> str:
        """The idempotence key of the batch's commits."""
        return f"{self.source}@{self.key}"

    @property
    def shown(self) -> str:
        """What the ingest log and quarantine record as the batch's "file"."""
        return f"kafka:{self.topic}#batch={self.number}"

    def offsets_json(self, which: int) -> str:
        """Spark's ``startingOffsets`` (0) or ``endingOffsets`` (1) for the batch."""
        return json.dumps({self.topic: {str(p): r[which] for p, r in sorted(self.ranges.items())}})


def stored_batch(settings: Settings, source: str, number: int | None = None) -> Batch | None:
    """Batch ``number`` of the source (default: its newest), or None.

    Read on the driver (:mod:`outoforder.io.deltars`): no Spark job for a few small rows. Of two
    runs that claimed the same number, the first claim in the table's log stands
    (:func:`first_claim`); a batch's listing time is its newest cover's.
    """
    import pyarrow.compute as pc

    from outoforder.io import deltars

    rows = deltars.read_table(KAFKA_OFFSETS, settings.lake_root, settings.storage, [("source", "=", source)])
    if rows is None or rows.num_rows == 0:
        return None  # no ingest has run yet
    if number is None:
        number = int(pc.max(rows.column("batch")).as_py())
    got = rows.filter(pc.equal(rows.column("batch"), number)).to_pylist()  # per partition, per copy
    if not got:
        return None
    claims = sorted({str(r["ingest_id"]) for r in got})
    if len(claims) > 1:
        won = first_claim(settings, claims)
        got = [r for r in got if r["ingest_id"] == won]
    ranges = {int(r["partition"]): (int(r["start_offset"]), int(r["end_offset"])) for r in got}
    first = got[0]

    def num(name: str, default: int) -> int:  # columns added later are null in older rows
        value = first.get(name)
        return default if value is None else int(value)

    return Batch(
        source, number, first["topic"], first["topic_id"], ranges,
        max(int(r["listed_at_us"]) for r in got), num("file_ordinal", -1), num("first_rank", 0),
        num("bronze_after", -1), len(got) // max(1, len(ranges)),
    )  # fmt: skip


def first_claim(settings: Settings, claims: list[str]) -> str:
    """Of batch claims (ingest ids) that raced for one number, the one the table's log holds first.

    Each claim is a commit tagged with its ingest id. Should the log no longer hold them (cleaned up
    long after), the smallest id stands, the same for every reader.
    """
    from outoforder.io import deltalog

    tagged = deltalog.first_tagged(KAFKA_OFFSETS.path(settings.lake_root), set(claims), settings.storage)
    return tagged if tagged is not None else claims[0]


def batch_done(settings: Settings, ingest_id: str) -> bool:
    """Whether the ingest log holds the batch's ``done`` row (read on the driver, no Spark job)."""
    from outoforder.stages.ingest.plan import ingest_log

    return bool(ingest_log(settings, [("ingest_id", "=", ingest_id), ("status", "=", "done")], ["ingest_id"]))


def check_readable(batch: Batch, state: TopicState) -> None:
    """Fail, naming partitions and offsets, unless the broker still holds every offset ``batch`` reads.

    Also fails when the topic is not the one the batch was planned on (deleted and created again).
    """
    where = f"source {batch.source!r}, topic {batch.topic!r}"
    if state.topic_id != batch.topic_id:
        msg = (
            f"{where}: the topic was deleted and created again (topic id {batch.topic_id} -> "
            f"{state.topic_id}); batch {batch.number} read up to "
            + ", ".join(f"partition {p} offset {e}" for p, (_, e) in sorted(batch.ranges.items()))
            + ". Records of the old topic that were not ingested are gone; to ingest the new topic, "
            "declare it as a new source (bronze keeps one arrival order per source)"
        )
        raise StateError(msg)
    gone = sorted(set(batch.ranges) - set(state.offsets))
    if gone:
        msg = f"{where}: partitions {gone} no longer exist (the topic has {len(state.offsets)})"
        raise StateError(msg)
    expired = [
        f"partition {p}: [{s}, {min(state.offsets[p][0], e)}) (the log starts at {state.offsets[p][0]})"
        for p, (s, e) in sorted(batch.ranges.items())
        if s < e and state.offsets[p][0] > s
    ]
    if expired:
        msg = (
            f"{where}: records expired before they were ingested (retention, or deleted records): "
            + "; ".join(expired)
            + ". They cannot be read any more; nothing was written for them"
        )
        raise StateError(msg)
    behind = [
        f"partition {p}: needs offset {e}, the log ends at {state.offsets[p][1]}"
        for p, (_, e) in sorted(batch.ranges.items())
        if state.offsets[p][1] < e
    ]
    if behind:
        msg = (
            f"{where}: the log is shorter than what was already read ({'; '.join(behind)}): the topic "
            "was recreated or truncated"
        )
        raise StateError(msg)


def plan_batch(previous: Batch | None, source: str, state: TopicState, listed_at_us: int) -> Batch:
    """The next batch: from where ``previous`` ended (or the earliest offsets) to the log end."""
    if state.timestamp_type != LOG_APPEND_TIME:
        msg = (
            f"topic {state.topic!r} stamps records with the producer's time ({state.timestamp_type}); the "
            f"arrival order needs the broker's: set the topic's message.timestamp.type={LOG_APPEND_TIME}"
        )
        raise ConfigError(msg)
    starts: dict[int, int] = {}
    if previous is not None:
        check_readable(previous, state)
        starts = {p: e for p, (_, e) in previous.ranges.items()}
    ranges = {p: (starts.get(p, low), high) for p, (low, high) in state.offsets.items()}
    number = 0 if previous is None else previous.number + 1
    batch = Batch(source, number, state.topic, state.topic_id, ranges, listed_at_us)
    check_readable(batch, state)
    if previous is not None and previous.ordinal >= 0:  # numbered on under the same ordinal while it lasts
        first_rank = previous.first_rank + previous.records
        if first_rank + batch.records < SEQ_PER_FILE:
            return replace(batch, ordinal=previous.ordinal, first_rank=first_rank)
    return batch


def offset_rows(spark: SparkSession, batch: Batch) -> DataFrame:
    """The batch as rows of bronze/kafka_offsets, one per partition."""
    b = batch
    rows = [
        (b.source, b.number, b.topic, b.topic_id, p, s, e, b.listed_at_us, b.ingest_id, b.ordinal,
         b.first_rank, b.bronze_after)
        for p, (s, e) in sorted(b.ranges.items())
    ]  # fmt: skip
    return spark.createDataFrame(rows, KAFKA_OFFSETS.schema)


def covered_until(settings: Settings, source: str) -> int | None:
    """Arrival time up to which bronze holds every record of a Kafka source (None before its first batch).

    A record appended before a batch listed the log's ends is in that batch or an earlier one; the
    newest batch that is committed (or empty) therefore covers up to its listing time, which an
    ingest run that finds nothing new moves on (:mod:`outoforder.stages.ingest.kafka`).
    """
    newest = stored_batch(settings, source)
    if newest is None:
        return None
    if not newest.records or batch_done(settings, newest.ingest_id):
        return newest.listed_at_us
    # a batch is planned only once the one before it is committed (or empty)
    before = stored_batch(settings, source, newest.number - 1) if newest.number else None
    return before.listed_at_us if before is not None else None


def cover_hint_path(settings: Settings, source: str) -> Path:
    """Where the ingest leaves how far it covers ``source`` for the stream stages (a small JSON file)."""
    return status_files.status_path(settings, "kafka", source)


def write_cover_hint(settings: Settings, source: str, covered_until_us: int) -> None:
    """After a commit: the new coverage, for :func:`wait_covered` to wait on without asking Spark.

    A hint only: bronze's tables stay the truth (the stream stage looks there before it runs), and
    a process that cannot see the file (another machine's work dir) looks there every poll instead.
    """
    path = cover_hint_path(settings, source)
    try:
        status_files.write_status(
            path, {"lake": str(settings.lake_root), "covered_until_us": covered_until_us}
        )
    except OSError as e:  # the ingest has committed; a missing hint only costs the stream stages looks
        log.warning("[kafka] %s: could not leave the coverage hint at %s: %s", source, path, e)


def read_cover_hint(settings: Settings, source: str) -> int | None:
    """The coverage the ingest left for this lake (None: no hint, or another lake's)."""
    try:
        hint = status_files.read_status(cover_hint_path(settings, source))
    except (OSError, ValueError):
        return None
    if not isinstance(hint, dict) or hint.get("lake") != str(settings.lake_root):
        return None
    value = hint.get("covered_until_us")
    return value if isinstance(value, int) else None


def wait_covered(settings: Settings, source: str, end_us: int) -> int:
    """How far (µs) the Kafka ingest covers ``source``, once it reaches ``end_us`` or the wait ends.

    0: nothing covered yet.

    A stream pass and the ingest run of the same minute start together: the pass waits for the
    ingest's commit (up to ``kafka.cover_wait_s``, every ``kafka.cover_poll_s``, looking at the hint
    the ingest leaves and, every :data:`HINT_POLLS` polls, at bronze's bookkeeping), then processes
    what is covered; the rest waits for the next run.
    """
    deadline = time.monotonic() + settings.kafka.cover_wait_s
    covered = covered_until(settings, source)
    polls = 0
    while (covered is None or covered < end_us) and time.monotonic() < deadline:
        if polls == 0:
            log.info("[kafka] %s: waiting for the ingest to cover %d µs", source, end_us)
        time.sleep(settings.kafka.cover_poll_s)
        polls += 1
        hint = read_cover_hint(settings, source)
        if hint is not None and hint < end_us and polls % HINT_POLLS:
            continue
        covered = covered_until(settings, source)
    return 0 if covered is None else covered
