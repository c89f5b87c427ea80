"""Fuzzing ingest end to end: hostile files into Delta, every row accounted for, equal to one reader.

Each example is two files of mutated real lines (:mod:`tests.sources.hostile`) into one source, so
the cross-file duplicate check runs too, ingested in byte ranges of a few hundred bytes (many Spark
tasks per file, duplicates across them). Per file: the ingest log says rows read = accepted +
quarantined; bronze holds exactly the rows, and quarantine exactly the lines, reasons and details
that reading the file in one place gives (:func:`~outoforder.sources.parsing.read_file`), less the
rows an earlier file of the source delivered, which are quarantined as duplicates; bronze rows are
valid. Few examples here (each is a few Spark jobs): a 30th of ``OOO_FUZZ_EXAMPLES`` (150 by default,
so 5), as docs/reliability.md says.
"""

import dataclasses
import itertools
import math
import os

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from pyspark.sql import functions as F

from outoforder.io import delta
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE
from outoforder.sources.declared import make_reader
from outoforder.sources.parsing import ACROSS_FILES, read_file
from outoforder.stages.ingest.files import ingest_file
from tests.sources.hostile import MAX_LINE, REASONS, good_lines, hostile_file, write

pytestmark = [pytest.mark.spark, pytest.mark.delta]

EXAMPLES = max(1, int(os.environ.get("OOO_FUZZ_EXAMPLES", "150")) // 30)
COUNTER = itertools.count()


def test_hostile_files_are_ingested_with_every_row_accounted_for(spark, settings, tmp_path, data_dir):
    tiny = dataclasses.replace(settings.ingest, max_line_bytes=MAX_LINE, part_bytes=400, batch_rows=5)
    lake = dataclasses.replace(settings, ingest=tiny)
    templates = {r: good_lines(r) for r in ("debs2013", "ooo", "debs2015")}

    @examples(
        max_examples=EXAMPLES, deadline=None, database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip
    @given(st.sampled_from(sorted(templates)), st.data())
    def fuzz(reader, data):
        source = f"fuzz/{reader}-{next(COUNTER)}"
        earlier: set[int] = set()  # row hashes an earlier file of the source delivered
        for part in range(2):
            content, _ = data.draw(hostile_file(reader, templates[reader]))
            path = write(tmp_path, f"{source.replace('/', '_')}-{part}.bin", content)
            s = ingest_file(spark, lake, path, reader, source)
            if s.skipped:  # the same bytes as the first file: already ingested, nothing new
                continue
            log = (
                delta.read(spark, INGEST_LOG, lake.lake_root)
                .where((F.col("ingest_id") == s.ingest_id) & (F.col("status") == "done"))
                .collect()
            )
            assert len(log) == 1
            row = log[0]
            assert row["rows_read"] == row["rows_accepted"] + row["rows_quarantined"] == s.rows_read
            this = F.col("ingest_id") == s.ingest_id
            bronze = delta.read(spark, BRONZE, lake.lake_root).where(this)
            quarantine = delta.read(spark, QUARANTINE, lake.lake_root).where(this)
            assert bronze.count() == row["rows_accepted"]
            reasons = [r["reason"] for r in quarantine.select("reason").collect()]
            assert len(reasons) == row["rows_quarantined"] and set(reasons) <= REASONS
            lo, hi = lake.ingest.plausible_range(reader)
            # the same rows and lines as reading the file in one place
            one = list(read_file(path, make_reader(reader), (lo, hi), max_line_bytes=MAX_LINE))
            rows = [r for b in one for r in b.accepted.to_pylist()]
            kept = [r for r in rows if r["row_hash"] not in earlier]
            lines = [r for b in one for r in b.quarantined.to_pylist()]
            lines += [
                {
                    "line_no": r["line_no"],
                    "raw_line": r["raw_line"],
                    "reason": "duplicate_row",
                    "detail": ACROSS_FILES,
                }
                for r in rows
                if r["row_hash"] in earlier
            ]
            cols = ["line_no", "stream", "key", "event_ts", "arrival_ts", "x", "y", "z", "value", "row_hash"]
            got = [r.asDict() for r in bronze.select(*cols).orderBy("line_no").collect()]
            assert got == [{c: r[c] for c in cols} for r in kept]
            stored = quarantine.select("line_no", "raw_line", "reason", "detail").orderBy("line_no").collect()
            assert [r.asDict() for r in stored] == sorted(lines, key=lambda r: r["line_no"])
            earlier |= {r["row_hash"] for r in rows}
            for r in bronze.select("event_ts", "arrival_ts", "x", "y", "z", "value").collect():
                assert lo <= r["event_ts"] <= hi
                assert all(v is None or math.isfinite(v) for v in (r["x"], r["y"], r["z"], r["value"]))

    fuzz()
