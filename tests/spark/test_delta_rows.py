"""Driver-side rows through Delta Kernel: ``append_rows`` and ``replace_rows`` against Spark's writer.

What they must keep from the Spark writes they replace: the same rows read back, the transaction
ids that make an append idempotent, ``replaceWhere``'s slice semantics (a rerun replaces, rows
outside the slice are not written), and no lost update when a commit lands between the look at
the table and the Kernel commit.
"""

import pytest
from pyspark.sql import functions as F

from outoforder.errors import SchemaError, WriteConflict
from outoforder.io import delta
from outoforder.io.tables import JOIN_STATE, QUALITY_MEASURES, QUALITY_RUNS

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SRC = "o'hare/gate-1"  # quoting in partition values and conditions


def measures(job, items, at, measure="join_recall"):
    return [(SRC, job, measure, i, i * 10, i * 10 + 10, 0.5 + i / 100, 0.9, i % 2 == 0, at) for i in items]


def table(spark, t, settings, where=None):
    df = delta.read(spark, t, settings.lake_root)
    return sorted(tuple(r) for r in (df if where is None else df.where(where)).collect())


def test_append_rows_reads_back_as_spark_wrote_it_and_is_idempotent(spark, settings):
    row = {f.name: None for f in JOIN_STATE.schema.fields}
    names = JOIN_STATE.schema.fieldNames()
    ints = {f.name for f in JOIN_STATE.schema.fields if f.dataType.typeName() == "long"}
    row |= {n: 7 for n in ints} | {"source": SRC, "job": "qj-1"}
    first = tuple(row[n] for n in names)
    assert delta.append_rows(spark, JOIN_STATE, settings.lake_root, settings.storage, [first], "app", 0)
    assert not delta.append_rows(spark, JOIN_STATE, settings.lake_root, settings.storage, [first], "app", 0)
    again = tuple({**row, "as_of_us": 8}[n] for n in names)
    assert not delta.append_rows(spark, JOIN_STATE, settings.lake_root, settings.storage, [again], "app", 0)
    assert delta.append_rows(spark, JOIN_STATE, settings.lake_root, settings.storage, [again], "app", 1)
    assert table(spark, JOIN_STATE, settings) == sorted([first, again])
    # partition pruning and statistics work on the Kernel-written file as on Spark's
    pruned = delta.read(spark, JOIN_STATE, settings.lake_root).where(F.col("source") == SRC)
    assert pruned.where(F.col("as_of_us") == 8).count() == 1
    other = tuple({**row, "source": "b"}[n] for n in names)
    with pytest.raises(SchemaError, match="one partition"):
        delta.append_rows(spark, JOIN_STATE, settings.lake_root, settings.storage, [first, other], "app", 2)


def test_replace_rows_appends_new_slices_and_replaces_old_ones(spark, settings, monkeypatch):
    lake, storage = settings.lake_root, settings.storage
    spark_writer = delta.replace_where

    def no_scan(*args, **kwargs):
        pytest.fail("a new slice went through replaceWhere (a scan of the table)")

    monkeypatch.setattr(delta, "replace_where", no_scan)
    match = {"source": SRC, "job": "qj-1", "measure": "join_recall"}
    delta.replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", range(0, 5), 1), match, ("item", 0, 5)
    )
    delta.replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", range(5, 9), 1), match, ("item", 5, 9)
    )
    # another job's slice of the same items: its own rows, not a replacement of qj-1's
    other = {**match, "job": "qj-2"}
    delta.replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-2", range(0, 5), 1), other, ("item", 0, 5)
    )
    monkeypatch.setattr(delta, "replace_where", spark_writer)
    # a rerun of an old slice replaces it; rows outside the slice (item 9) are dropped, not written
    delta.replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", range(3, 10), 2), match, ("item", 3, 9)
    )
    got = table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-1")
    assert got == sorted(measures("qj-1", range(0, 3), 1) + measures("qj-1", range(3, 9), 2))
    assert len(table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-2")) == 5
    # a whole-job slice (no range) with files in it goes through replaceWhere as well
    delta.replace_rows(spark, QUALITY_MEASURES, lake, storage, measures("qj-2", [1], 3), other)
    assert table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-2") == measures("qj-2", [1], 3)


def test_replace_rows_into_an_unpartitioned_table(spark, settings):
    lake, storage = settings.lake_root, settings.storage
    row = ("join", "join_recall", SRC, "qj-1", "run-1", True, 2, 2, [], "fail", None, 5)
    match = {"checkpoint": "join", "source": SRC, "job": "qj-1", "run_name": "run-1"}
    delta.replace_rows(spark, QUALITY_RUNS, lake, storage, [row], match)
    delta.replace_rows(
        spark, QUALITY_RUNS, lake, storage, [(*row[:5], False, 1, 2, ["x"], "fail", None, 6)], match
    )
    assert table(spark, QUALITY_RUNS, settings) == [(*row[:5], False, 1, 2, ["x"], "fail", None, 6)]


def slip_in(monkeypatch, writes):
    """Make each look at the table (``_may_hold``) be followed by the next of ``writes`` (a commit)."""
    looked = delta._may_hold
    pending = list(writes)

    def look_then_commit(spark_, snapshot, predicate):
        found = looked(spark_, snapshot, predicate)
        if pending:
            pending.pop(0)()
        return found

    monkeypatch.setattr(delta, "_may_hold", look_then_commit)


def test_replace_rows_looks_again_when_a_commit_lands_before_its_own(spark, settings, monkeypatch):
    lake, storage = settings.lake_root, settings.storage
    match = {"source": SRC, "job": "qj-1", "measure": "join_recall"}
    other = {**match, "job": "qj-2"}

    def rival(job, at, slice_):
        df = spark.createDataFrame(measures(job, [1], at), QUALITY_MEASURES.schema)
        return lambda: delta.replace_where(df, QUALITY_MEASURES, lake, slice_, ("item", 1, 2))

    # a commit to another slice in between: looked at again, still empty, appended by Kernel
    slip_in(monkeypatch, [rival("qj-2", 9, other)])
    delta.replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", [1], 2), match, ("item", 1, 2)
    )
    assert table(spark, QUALITY_MEASURES, settings) == sorted(
        measures("qj-1", [1], 2) + measures("qj-2", [1], 9)
    )
    # a commit into the same slice in between: the second look finds it, replaceWhere replaces it
    slip_in(monkeypatch, [rival("qj-1", 7, match)])
    delta.replace_rows(
        spark, QUALITY_MEASURES, lake, storage, measures("qj-1", [1], 3), {**match}, ("item", 1, 2)
    )
    slip_in(monkeypatch, [])
    got = table(spark, QUALITY_MEASURES, settings)
    assert got == sorted(measures("qj-1", [1], 3) + measures("qj-2", [1], 9))
    # a commit before every look: the conflict goes to the caller's retry, nothing of it is visible
    busy = [rival("qj-2", 10 + k, other) for k in range(delta._LOOKS)]
    slip_in(monkeypatch, busy)
    with pytest.raises(WriteConflict):
        delta.replace_rows(
            spark, QUALITY_MEASURES, lake, storage, measures("qj-1", [5], 4), match, ("item", 5, 6)
        )
    slip_in(monkeypatch, [])
    assert table(spark, QUALITY_MEASURES, settings, F.col("job") == "qj-1") == measures("qj-1", [1], 3)
