"""Driver-side rows through Delta's writer, and the transaction ids read back from Delta's log.

What must hold: the same rows read back as written, transaction ids that make an append idempotent
(and that the log reader of :mod:`outoforder.io.deltalog` finds wherever the log keeps them: in the
newest checksum, in a checkpoint, or in the commits after it), and ``replaceWhere``'s slice
semantics (a rerun replaces, rows outside the slice are not written).
"""

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from outoforder.io import delta, deltalog, deltars
from outoforder.io.tables import JOIN_STATE, QUALITY_MEASURES, QUALITY_RUNS

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SRC = "o'hare/gate-1"  # quoting in partition values and conditions


def measures(job, items, at, measure="join_recall"):
    return [(SRC, job, measure, i, i * 10, i * 10 + 10, 0.5 + i / 100, 0.9, i % 2 == 0, at) for i in items]


def table(spark, t, settings, where=None):
    df = delta.read(spark, t, settings.lake_root)
    return sorted(tuple(r) for r in (df if where is None else df.where(where)).collect())


def state_row(**changes):
    row = {f.name: None for f in JOIN_STATE.schema.fields}
    ints = {f.name for f in JOIN_STATE.schema.fields if f.dataType.typeName() == "long"}
    row |= {n: 7 for n in ints} | {"source": SRC, "job": "qj-1", "kind": "state"} | changes
    return tuple(row[n] for n in JOIN_STATE.schema.fieldNames())


def test_append_rows_reads_back_as_spark_wrote_it_and_is_idempotent(spark, settings):
    lake, storage = settings.lake_root, settings.storage
    first, again = state_row(), state_row(as_of_us=8)
    assert delta.append_rows(spark, JOIN_STATE, lake, storage, [first], "app", 0)
    assert not delta.append_rows(spark, JOIN_STATE, lake, storage, [first], "app", 0)
    assert not delta.append_rows(spark, JOIN_STATE, lake, storage, [again], "app", 0)
    assert delta.append_rows(spark, JOIN_STATE, lake, storage, [again], "app", 1)
    assert table(spark, JOIN_STATE, settings) == sorted([first, again])
    # two partitions in one append
    other = state_row(source="b", as_of_us=9)
    assert delta.append_rows(spark, JOIN_STATE, lake, storage, [other, state_row(as_of_us=10)], "app", 2)
    pruned = delta.read(spark, JOIN_STATE, lake).where(F.col("source") == SRC)
    assert pruned.where(F.col("as_of_us") == 8).count() == 1
    assert delta.committed_version(JOIN_STATE, lake, "app") == 2
    assert delta.committed_version(JOIN_STATE, lake, "nobody") is None


def test_the_log_reader_finds_transactions_in_checksums_checkpoints_and_commits(spark, settings):
    lake, storage = settings.lake_root, settings.storage
    path = Path(JOIN_STATE.path(lake))
    assert deltalog.newest_version(str(path)) is None and deltalog.transactions(str(path)) == {}
    delta.ensure(spark, JOIN_STATE, lake)  # version 0; then checkpoints every 3 versions
    every_three = "SET TBLPROPERTIES (delta.checkpointInterval = 3)"
    spark.sql(f"ALTER TABLE {delta.table_sql(JOIN_STATE, lake)} {every_three}")
    for v in range(8):
        delta.append_rows(spark, JOIN_STATE, lake, storage, [state_row(as_of_us=v)], f"app-{v % 3}", v)
    log = path / "_delta_log"
    assert sorted(p.name for p in log.glob("*.checkpoint.parquet"))  # the reader has a checkpoint to read
    expected = {"app-0": 6, "app-1": 7, "app-2": 5}
    newest = deltalog.newest_version(str(path))
    assert deltalog.transactions(str(path)) == expected
    # without checksums: the newest checkpoint and the commits after it
    for crc in log.glob("*.crc"):
        crc.unlink()
    assert deltalog.transactions(str(path)) == expected
    assert deltalog.newest_version(str(path)) == newest
    # what Delta itself decides from the same log: a replayed (app, version) is skipped
    assert not delta.append_rows(spark, JOIN_STATE, lake, storage, [state_row(as_of_us=99)], "app-1", 7)
    assert delta.read(spark, JOIN_STATE, lake).where(F.col("as_of_us") == 99).count() == 0


# Spark's replaceWhere, and delta-rs's on the driver (the checks' small rows): the same slices
WRITERS = {
    "spark": lambda spark, *args: delta.replace_rows(spark, *args),
    "driver": lambda spark, *args: deltars.replace_rows(*args),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_replace_rows_appends_new_slices_and_replaces_old_ones(spark, settings, writer):
    lake, storage = settings.lake_root, settings.storage
    replace_rows = WRITERS[writer]
    match = {"source": SRC, "job": "qj-1", "measure": "join_recall"}
    replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", range(0, 5), 1), match, ("item", 0, 5)
    )
    replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", range(5, 9), 1), match, ("item", 5, 9)
    )
    # another job's slice of the same items: its own rows, not a replacement of qj-1's
    other = {**match, "job": "qj-2"}
    replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-2", range(0, 5), 1), other, ("item", 0, 5)
    )
    # a rerun of an old slice replaces it; rows outside the slice (item 9) are dropped, not written
    replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", range(3, 10), 2), match, ("item", 3, 9)
    )
    got = table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-1")
    assert got == sorted(measures("qj-1", range(0, 3), 1) + measures("qj-1", range(3, 9), 2))
    assert len(table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-2")) == 5
    # a whole-job slice (no range)
    replace_rows(spark, QUALITY_MEASURES, lake, storage, measures("qj-2", [1], 3), other)
    assert table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-2") == measures("qj-2", [1], 3)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_replace_rows_into_an_unpartitioned_table(spark, settings, writer):
    lake, storage = settings.lake_root, settings.storage
    replace_rows = WRITERS[writer]
    row = ("join", "join_recall", SRC, "qj-1", "run-1", True, 2, 2, [], "fail", None, 5)
    match = {"checkpoint": "join", "source": SRC, "job": "qj-1", "run_name": "run-1"}
    replace_rows(spark, QUALITY_RUNS, lake, storage, [row], match)
    replace_rows(spark, QUALITY_RUNS, lake, storage, [(*row[:5], False, 1, 2, ["x"], "fail", None, 6)], match)
    assert table(spark, QUALITY_RUNS, settings) == [(*row[:5], False, 1, 2, ["x"], "fail", None, 6)]


def claim(ordinal, ingest_id):
    return (
        ingest_id,
        "started",
        ordinal,
        SRC,
        "f.csv",
        "sha",
        10,
        "debs2013",
        0,
        0,
        0,
        0,
        0,
        0,
        None,
        None,
        1,
    )


def test_merge_new_on_the_driver_inserts_only_new_keys_and_a_stale_snapshot_loses(
    spark, settings, monkeypatch
):
    from outoforder.errors import WriteConflict
    from outoforder.io.tables import INGEST_LOG

    lake, storage, keys = settings.lake_root, settings.storage, ("status", "file_ordinal")
    with pytest.raises(Exception, match="does not exist"):
        deltars.merge_new(INGEST_LOG, lake, storage, [claim(0, "a")], keys)
    delta.ensure(spark, INGEST_LOG, lake)
    assert deltars.merge_new(INGEST_LOG, lake, storage, [claim(0, "a"), claim(1, "b")], keys) == 2
    assert deltars.merge_new(INGEST_LOG, lake, storage, [claim(1, "c"), claim(2, "c")], keys) == 1
    assert (
        delta.merge_new(spark.createDataFrame([claim(2, "d")], INGEST_LOG.schema), INGEST_LOG, lake, keys)
        == 0
    )
    assert table(spark, INGEST_LOG, settings) == sorted([claim(0, "a"), claim(1, "b"), claim(2, "c")])
    # strings stay plain strings (not Arrow's view type), which the scans' filters compare
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = list(Path(INGEST_LOG.path(lake)).glob("*.parquet"))
    assert files and {pq.read_schema(f).field("source").type for f in files} == {pa.string()}
    got = deltars.read_table(
        INGEST_LOG, lake, storage, [("source", "in", [SRC, "x"]), ("file_ordinal", ">=", 1)]
    )
    assert got is not None and got.num_rows == 2

    # a writer whose snapshot predates another's claim of the same ordinal must not commit a second
    # row for it: Delta's conflict check fails it (the stage then redoes its claim from a fresh read)
    arrow, raced = deltars._arrow, []

    def racing(t, rows):
        if not raced:
            raced.append(1)
            assert deltars.merge_new(INGEST_LOG, lake, storage, [claim(3, "e")], keys) == 1
        return arrow(t, rows)

    monkeypatch.setattr(deltars, "_arrow", racing)
    with pytest.raises(WriteConflict):
        deltars.merge_new(INGEST_LOG, lake, storage, [claim(3, "f")], keys)
    got = table(spark, INGEST_LOG, settings, F.col("file_ordinal") == 3)
    assert got == [claim(3, "e")]
