"""The results MERGE reads only the files whose key range the new rows span (``merge_new(prune=...)``).

Proof by absence: the files of an old seq range are deleted from disk behind Delta's back. A MERGE
that still read them would fail on the missing file; the bounded MERGE does not touch them, and
still inserts exactly the keys that are new.
"""

from pathlib import Path

import pytest
from pyspark.sql import functions as F

from outoforder.errors import SchemaError
from outoforder.io import delta
from outoforder.io.tables import JOIN_RESULTS

pytestmark = [pytest.mark.spark, pytest.mark.delta]

KEYS = ("source", "job", "r_seq", "s_seq")


def pairs(spark, seqs: range):
    """Join results pairing r_seq with s_seq = r_seq + 1, one per seq."""
    rows = [("src", "job", s, s + 1, s, s + 1, s + 1, None, "stream", 0, 0, 0, 0) for s in seqs]
    return spark.createDataFrame(rows, JOIN_RESULTS.schema)


def test_a_bounded_merge_skips_the_files_of_older_seqs_and_inserts_only_new_keys(spark, settings):
    lake = settings.lake_root
    assert delta.merge_new(pairs(spark, range(0, 100)), JOIN_RESULTS, lake, KEYS) == 100
    assert delta.merge_new(pairs(spark, range(1000, 1100)), JOIN_RESULTS, lake, KEYS) == 100
    old_files = {
        r[0]
        for r in delta.read(spark, JOIN_RESULTS, lake)
        .where(F.col("r_seq") < 100)
        .select(F.input_file_name())
        .collect()
    }
    assert old_files
    for f in old_files:
        Path(f.removeprefix("file:")).unlink()

    batch = pairs(spark, range(1050, 1200))  # half already in the table
    added = delta.merge_new(batch, JOIN_RESULTS, lake, KEYS, prune=("r_seq", "s_seq"))

    assert added == 100
    got = delta.read(spark, JOIN_RESULTS, lake).where(F.col("r_seq") >= 1000).select("r_seq")
    assert sorted(r[0] for r in got.collect()) == list(range(1000, 1200))
    # the same MERGE unbounded reads every file of the source, the deleted ones too
    with pytest.raises(Exception, match=r"(?i)(not exist|FileNotFound|FILE_NOT_EXIST)"):
        delta.merge_new(pairs(spark, range(1200, 1210)), JOIN_RESULTS, lake, KEYS)


def test_bounding_on_a_column_that_is_not_a_key_is_refused(spark, settings):
    with pytest.raises(SchemaError, match="not among its keys"):
        delta.merge_new(pairs(spark, range(3)), JOIN_RESULTS, settings.lake_root, KEYS, prune=("r_ts",))


def test_an_empty_bounded_merge_inserts_nothing(spark, settings):
    empty = pairs(spark, range(0))
    assert delta.merge_new(empty, JOIN_RESULTS, settings.lake_root, KEYS, prune=("r_seq",)) == 0
