"""Replay a bronze source into a Kafka topic, in its arrival order, at a chosen speed (demos, benchmarks).

Each row becomes one JSON record (``stream``, ``key``, ``event_ts`` in µs, the value columns and
``attrs``) keyed by the row's key, so one key's records stay in one partition in arrival order.
With ``speed`` > 0 the records are sent at their original arrival spacing divided by ``speed``:
the event-time disorder the source had is what the topic gets. :func:`declaration_toml` prints the
``[sources.<name>]`` table that reads the topic back.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from outoforder.config import Settings
from outoforder.errors import InputError
from outoforder.io import delta, kafka
from outoforder.io.tables import BRONZE
from outoforder.sources.declaration import DEFAULT_PLAUSIBLE_US

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
VALUE_FIELDS = ("x", "y", "z", "value")


@dataclass(frozen=True)
class Produced:
    """What a replay sent."""

    topic: str
    records: int
    streams: tuple[str, ...]
    seconds: float
    event_range: tuple[int, int]  # the smallest and largest event_ts sent (µs)
    attrs: tuple[str, ...] = ()  # the attribute names the records carry

    def line(self) -> str:
        """The one-line summary."""
        rate = self.records / max(self.seconds, 1e-9)
        return (
            f"[produce] {self.records:,} records into {self.topic!r} in {self.seconds:.1f} s ({rate:,.0f}/s)"
        )


def record(row: Any, shift_us: int = 0) -> tuple[bytes, bytes]:
    """One bronze row as a Kafka (key, value): the JSON the printed declaration reads."""
    body: dict[str, Any] = {
        "stream": row["stream"],
        "key": row["key"],
        "event_ts": row["event_ts"] + shift_us,
    }
    body |= {c: row[c] for c in VALUE_FIELDS if row[c] is not None}
    if row["attrs"]:
        body |= {k: v for k, v in dict(row["attrs"]).items() if k not in body}
    return str(row["key"]).encode(), json.dumps(body, separators=(",", ":")).encode()


CATCH_UP = 2.0  # a paced replay behind its schedule sends at most this many times its pace
SLEEP_MIN_S = 0.002  # shorter waits are not slept (sleeping per record would cap the rate)


def paced(
    arrivals_us: Iterator[int | None],
    speed: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[float]:
    """For each arrival (µs, in arrival order), once it may be sent: the clock then.

    A record is sent no sooner than its arrival offset from the first one divided by ``speed``
    (0: no pacing), the clock starting at the first record (fetching it may take seconds). A
    sender that falls behind (fetching the next rows, a busy machine) does not send its backlog at
    once: it catches up at most :data:`CATCH_UP` times the pace. A burst would share a log-append
    time: a producer batches a partition's records, the broker stamps a batch with one time, and
    the partitions' batches of one instant are read back one partition after the other, which
    reorders up to the burst's span of event time (seconds, after a stall of seconds).

    >>> t = [0.0]
    >>> def sleep(s): t[0] += s
    >>> at = list(paced(iter([0, 1_000_000, 2_000_000]), 1.0, lambda: t[0], sleep))
    >>> at
    [0.0, 1.0, 2.0]
    >>> t[0] = 0.0  # three records due at 0, 0.1 and 0.2 s, the sender 1 s late from the second
    >>> def late(s): t[0] += s
    >>> sends = paced(iter([0, 100_000, 200_000, 300_000]), 1.0, lambda: t[0], late)
    >>> next(sends); t[0] = 1.1; [round(x, 3) for x in sends]  # spaced 0.05 s: twice the pace
    0.0
    [1.1, 1.15, 1.2]
    """
    start: float | None = None
    first = 0
    prev_due = 0.0  # the previous record's offset from the first one (s, at the replay's pace)
    prev_at = 0.0  # when it was sent (s since the start)
    for arrival in arrivals_us:
        now = clock()
        if speed <= 0 or arrival is None:
            yield now
            continue
        if start is None:
            start, first = now, arrival
        due = (arrival - first) / 1e6 / speed
        # on time: when due; behind: no sooner than the previous record plus its spacing sped up
        at = max(due, prev_at + (due - prev_due) / CATCH_UP) if due < now - start else due
        wait = at - (now - start)
        if wait > SLEEP_MIN_S:
            sleep(wait)
        prev_due, prev_at = due, max(at, now - start)
        yield clock()


def _paced(rows: Iterator[Any], speed: float, shift_us: int) -> Iterator[tuple[bytes, bytes]]:
    """Rows as records, each sent when :func:`paced` says."""
    rows, arrivals = itertools.tee(rows)
    for row, _ in zip(rows, paced((r["arrival_ts"] for r in arrivals), speed), strict=True):
        yield record(row, shift_us)


RANGE_ROWS = 200_000  # rows fetched at a time (an Arrow table of them in the producer's memory)


def _in_arrival_order(
    spark: SparkSession,
    settings: Settings,
    source: str,
    rows: Any,
    columns: list[str],
    whole: tuple[int, int, int],
) -> Iterator[dict[str, Any]]:
    """The source's rows in arrival order as dicts, fetched as Arrow tables of consecutive arrivals.

    The ranges are the source's ingests (each file or Kafka batch holds one dense range of arrival
    sequence numbers, from the ingest log; ``whole``, the source's (first, last, rows), where the
    log has none), cut into pieces of about :data:`RANGE_ROWS`: a row of an Arrow table costs far
    less to take apart than a Spark row streamed one at a time.
    """
    from pyspark.sql import functions as F

    from outoforder.io.tables import INGEST_LOG

    log_rows = (
        delta.read(spark, INGEST_LOG, settings.lake_root)
        .where(F.col("status") == "done")
        .where(F.col("source") == source)
        .where(F.col("arrival_seq_first").isNotNull())
        .select("arrival_seq_first", "arrival_seq_last", "rows_accepted")
        .orderBy("arrival_seq_first")
        .collect()
        if delta.exists(spark, INGEST_LOG, settings.lake_root)
        else []
    )  # one row per ingested file or batch
    done = [tuple(r) for r in log_rows] or [whole]

    def bounds() -> Iterator[tuple[int, int]]:
        for lo, hi, n in done:
            pieces = max(1, -(-int(n) // RANGE_ROWS))
            step = -(-(int(hi) - int(lo) + 1) // pieces)
            for start in range(int(lo), int(hi) + 1, step):
                yield start, min(start + step, int(hi) + 1)

    def fetch(span: tuple[int, int]) -> dict[str, list[Any]]:
        piece = rows.where((F.col("arrival_seq") >= span[0]) & (F.col("arrival_seq") < span[1]))
        return dict(piece.orderBy("arrival_seq").select(*columns).toArrow().to_pydict())

    # the next piece is fetched while this one is sent: a paced replay does not stall between them
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="produce-fetch") as pool:
        spans = bounds()
        ahead: Future[dict[str, list[Any]]] | None = None
        span = next(spans, None)
        if span is not None:
            ahead = pool.submit(fetch, span)
        while ahead is not None:
            cols = ahead.result()
            span = next(spans, None)
            ahead = None if span is None else pool.submit(fetch, span)
            for i in range(len(cols[columns[0]])):
                yield {c: cols[c][i] for c in columns}


def replay(
    spark: SparkSession,
    settings: Settings,
    source: str,
    topic: str,
    *,
    partitions: int = 3,
    speed: float = 0.0,
    limit: int | None = None,
    live: bool = False,
    declaration: tuple[str, Path] | None = None,
    only_declare: bool = False,
) -> Produced:
    """Send ``source``'s bronze rows to ``topic`` (created with log-append time if missing).

    ``live`` shifts every event time by one constant, so that the first arrival's time is now: a
    replay with its own clock (a synthetic game starts near 0) then looks like a stream of today
    to the stages that compare event time with log-append time. The disorder is kept.
    ``declaration`` (a source name and a file) writes the ``[sources.<name>]`` table that reads the
    topic back before anything is sent; ``only_declare`` stops there (the topic is created).
    """
    from pyspark.sql import functions as F

    rows = delta.read_arrivals(spark, BRONZE, settings.lake_root, source=source)
    facts = rows.agg(
        F.sort_array(F.collect_set("stream")),
        F.min("event_ts"),
        F.max("event_ts"),
        F.sort_array(F.array_distinct(F.flatten(F.collect_set(F.map_keys("attrs"))))),
        F.min("arrival_ts"),
        F.min("arrival_seq"),
        F.max("arrival_seq"),
        F.count("*"),
    ).first()  # one row: the few stream and attribute names, and the event-time range
    if facts is None or facts[1] is None:
        msg = f"bronze holds no rows of source {source!r}: ingest it first"
        raise InputError(msg)
    shift = time.time_ns() // 1000 - int(facts[4] if facts[4] is not None else facts[1]) if live else 0
    streams, event_range = tuple(facts[0]), (int(facts[1]) + shift, int(facts[2]) + shift)
    attrs = tuple(a for a in facts[3] or () if a not in ("stream", "key", "event_ts", *VALUE_FIELDS))
    columns = ["stream", "key", "event_ts", "arrival_ts", *VALUE_FIELDS, "attrs"]
    created = kafka.create_topic(settings.kafka.bootstrap, topic, partitions)
    log.info(
        "[produce] %s topic %r (%s)",
        "created" if created else "appending to",
        topic,
        settings.kafka.bootstrap,
    )
    if declaration is not None:
        name, path = declaration
        # a live replay's times lie around now, in the default plausible range: none to state
        path.write_text(declaration_toml(name, topic, streams, None if live else event_range, attrs))
        log.info("[produce] the declaration of %r that reads %r back: %s", name, topic, path)
    if only_declare:
        return Produced(topic, 0, streams, 0.0, event_range, attrs)
    t0 = time.monotonic()
    # streamed in arrival order, one arrival range (an ingested file or batch) at a time, and cut
    # there: orderBy + limit would gather the rows on the driver
    whole = (int(facts[5]), int(facts[6]), int(facts[7]))
    ordered = itertools.islice(_in_arrival_order(spark, settings, source, rows, columns, whole), limit)
    n = kafka.produce(settings.kafka.bootstrap, topic, _paced(ordered, speed, shift), until_stopped=live)
    return Produced(topic, n, streams, time.monotonic() - t0, event_range, attrs)


def declaration_toml(
    name: str,
    topic: str,
    streams: tuple[str, ...],
    event_range: tuple[int, int] | None = None,
    attrs: tuple[str, ...] = (),
) -> str:
    """The ``[sources.<name>]`` table that reads a replayed topic back.

    Event times outside the default plausible range (a synthetic replay's game clock starts near 0)
    get a ``plausible_event_us`` that holds ``event_range``, so the records are not quarantined.

    >>> print(declaration_toml("yard", "yard", ("a", "b"), (10, 20), ("site",)).splitlines()[-2:])
    ['attrs = ["site"]', 'plausible_event_us = [0, 4102444800000000]']
    """
    values = ", ".join(f'{c} = "{c}"' for c in VALUE_FIELDS)
    lo, hi = DEFAULT_PLAUSIBLE_US
    plausible = ""
    if event_range is not None and not lo <= event_range[0] <= event_range[1] <= hi:
        plausible = f"plausible_event_us = [{min(lo, event_range[0], 0)}, {max(hi, event_range[1] + 1)}]\n"
    return (
        f"[sources.{name}]\n"
        f'topic = "{topic}"\n'
        'format = "jsonl"\n'
        'key = "key"\n'
        'event_time = { column = "event_ts", unit = "us" }\n'
        f'stream = {{ column = "stream", values = {json.dumps(list(streams))} }}\n'
        f"values = {{ {values} }}\n" + (f"attrs = {json.dumps(list(attrs))}\n" if attrs else "") + plausible
    )
