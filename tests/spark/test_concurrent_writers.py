"""Concurrent writers: a repair, a stream pass and table maintenance on one table at once.

The overlap is forced, not hoped for: the repair's write into ``gold/agg_results`` (delta-rs, on
the driver) is held inside its transaction (its rows are a stream that waits for a file, consumed
after the write has read its snapshot) while a stream interval appends its results to the same
partition and OPTIMIZE rewrites its files. An interval only appends (a blind append,
which conflicts with nothing), so it commits at once; Delta must then refuse the repair's commit,
and the repair must redo its whole work against the new snapshot. The outcome has to equal the
serial order "maintenance, interval, then repair" (nothing lost, nothing twice). Maintenance must
also keep the files that a reader of an older snapshot still needs.
"""

import dataclasses
import shutil
import threading
import time
from collections.abc import Callable

import pytest
from pyspark.sql import functions as F

from outoforder.io import conflicts, delta, deltars
from outoforder.io.tables import (
    AGG_LEDGER,
    AGG_REPAIRS,
    AGG_RESULTS,
    AGG_STATE,
    BRONZE,
    INGEST_LOG,
)
from outoforder.stages.aggregate.repair import repair
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.context import StageContext
from tests.sources.hostile import good_lines
from tests.spark.test_aggregate_stream import JOB, SOURCE, STEP, T0, arrivals

pytestmark = [pytest.mark.spark, pytest.mark.delta]

TABLES = (AGG_RESULTS, AGG_LEDGER, AGG_STATE, AGG_REPAIRS)


class Gate:
    """Holds the first gated write inside its transaction until :meth:`release`."""

    def __init__(self, folder):
        folder.mkdir()
        self.entered, self.opened = folder / "entered", folder / "open"
        self.armed = True
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            armed, self.armed = self.armed, False
            return armed

    def reader(self, data):
        """``data`` (Arrow) as a stream whose first batch waits for :meth:`release`."""
        import pyarrow as pa

        def batches():
            self.entered.touch()
            deadline = time.monotonic() + 300
            while not self.opened.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            yield from data.to_batches()

        return pa.RecordBatchReader.from_batches(data.schema, batches())

    def wait_entered(self, timeout=300):
        deadline = time.monotonic() + timeout
        while not self.entered.exists():
            assert time.monotonic() < deadline, "the gated write never started"
            time.sleep(0.1)

    def release(self):
        self.opened.touch()


def digests(spark, lake):
    return delta.content_digests(spark, lake, TABLES)


def overlap(spark, settings, tmp_path, monkeypatch, other: Callable[[object], None], first_cuts):
    """A forced repair with its results' write held open while ``other(settings)`` commits.

    Returns the repair's retries, the lake's digests and those of a serial twin (``other``, then
    the repair).
    """
    mid = T0 + 500 * STEP
    for lo, hi in zip([T0, *first_cuts], [*first_cuts, mid], strict=True):
        AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run(lo, hi, catch_up=True)
    serial = dataclasses.replace(settings, lake_root=tmp_path / "serial")
    shutil.copytree(settings.lake_root, serial.lake_root)

    gate = Gate(tmp_path / "gate")
    plain = deltars._arrow

    def held(table, rows):
        data = plain(table, rows)
        if table is AGG_RESULTS and threading.current_thread().name == "repair" and gate.take():
            return gate.reader(data)
        return data

    monkeypatch.setattr(deltars, "_arrow", held)
    before = conflicts.conflicts_seen().get("repair.repair", 0)
    failure: list[BaseException] = []
    fixed: list[object] = []

    def repairing():
        try:
            fixed.append(repair(StageContext.of(spark, settings, SOURCE, JOB), force=True))
        except BaseException as e:  # handed to the main thread
            failure.append(e)

    worker = threading.Thread(target=repairing, name="repair")
    worker.start()
    try:
        gate.wait_entered()
        other(settings)  # commits while the repair's write is held
    finally:
        gate.release()
        worker.join(600)
    assert not failure, failure
    retried = conflicts.conflicts_seen().get("repair.repair", 0) - before

    monkeypatch.setattr(deltars, "_arrow", plain)
    other(serial)
    repair(StageContext.of(spark, serial, SOURCE, JOB), force=True)
    return retried, fixed[0], digests(spark, settings.lake_root), digests(spark, serial.lake_root)


def test_an_interval_and_maintenance_committing_inside_a_repairs_write_force_its_retry_and_lose_nothing(
    spark, settings, load_bronze, tmp_path, monkeypatch
):
    load_bronze(arrivals(), SOURCE, 0)
    done = []

    def compact_and_run(s):
        done.append(delta.maintain(spark, AGG_RESULTS, s.lake_root))
        done.append(
            AggregateStream(StageContext.of(spark, s, SOURCE, JOB)).run(T0 + 500 * STEP, T0 + 900 * STEP)
        )

    # two passes first: several small files in the partition for OPTIMIZE to rewrite
    retried, fixed, got, serial = overlap(
        spark, settings, tmp_path, monkeypatch, compact_and_run, [T0 + 250 * STEP]
    )
    compacted, interval = done[0], done[1]
    assert fixed.ran and fixed.windows > 0 and interval.emitted > 0
    assert compacted["files_after"] < compacted["files_before"]
    assert retried >= 1
    assert got == serial


def test_maintenance_keeps_the_files_an_older_snapshot_reads(spark, settings, load_bronze):
    from delta.tables import DeltaTable

    frame = arrivals()
    load_bronze(frame, SOURCE, 0)
    path = BRONZE.path(settings.lake_root)
    version = DeltaTable.forPath(spark, path).history(1).first()["version"]
    reader = spark.read.format("delta").option("versionAsOf", version).load(path)  # opened before
    digest = delta.content_digest(spark, BRONZE, settings.lake_root)
    r = delta.maintain(spark, BRONZE, settings.lake_root)
    assert r["files_after"] < r["files_before"] and r["vacuumed"] == 0
    assert reader.count() == len(frame)  # its files, no longer in the current snapshot, are kept
    assert delta.content_digest(spark, BRONZE, settings.lake_root) == digest


def test_two_files_racing_for_the_same_file_ordinal_get_different_ones(
    spark, settings, tmp_path, monkeypatch
):
    from outoforder.stages.ingest import files as ingest

    lines = good_lines("debs2013", 40)
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("\n".join(lines[:20]) + "\n")
    b.write_text("\n".join(lines[20:]) + "\n")
    plain = deltars.merge_new
    raced: list[object] = []

    def racing(table, root, storage, rows, keys):
        if table is INGEST_LOG and not raced:  # b claims the ordinal a has just chosen, and finishes
            raced.append(b)
            ingest.ingest_file(spark, settings, b, "debs2013", "race/b")
        return plain(table, root, storage, rows, keys)

    monkeypatch.setattr(deltars, "merge_new", racing)
    ingest.ingest_file(spark, settings, a, "debs2013", "race/a")
    done = delta.read(spark, INGEST_LOG, settings.lake_root).where(F.col("status") == "done").collect()
    assert sorted(r["file_ordinal"] for r in done) == [0, 1]
    seqs = [
        r["arrival_seq"]
        for r in delta.read(spark, BRONZE, settings.lake_root).select("arrival_seq").collect()
    ]
    assert len(seqs) == len(set(seqs)) == 40


def test_merges_broadcast_only_small_tables_and_threads_sharing_the_session_restore_the_setting_once(spark):
    key = "spark.sql.autoBroadcastJoinThreshold"
    before = spark.conf.get(key)
    inner_in, inner_out = threading.Event(), threading.Event()

    def inner():
        with delta._merge_broadcast_limit(spark):
            inner_in.set()
            inner_out.wait(30)

    with delta._merge_broadcast_limit(spark):
        assert spark.conf.get(key) == delta.MERGE_BROADCAST_MAX
        t = threading.Thread(target=inner)
        t.start()
        assert inner_in.wait(30)
    # the first thread left; the second is still inside its MERGE: the limit stays
    assert spark.conf.get(key) == delta.MERGE_BROADCAST_MAX
    inner_out.set()
    t.join()
    assert spark.conf.get(key) == before
