"""Fuzzing the readers with mutated real lines: every line accounted for, every accepted row valid.

Properties, for any hostile file (see :mod:`tests.sources.hostile`):

- no exception escapes the reader;
- lines = header + blank + accepted + quarantined, and that is the file's physical line count
  (counted here independently) unless the gzip stream is cut;
- every quarantined line has one of the documented reasons;
- every accepted row is valid: event time (and arrival time) inside the plausible range, measures
  finite or absent, a non-empty key and stream.

``OOO_FUZZ_EXAMPLES`` raises the number of files per reader (the reliability run uses thousands).
"""

import math
import os

import pytest
from hypothesis import HealthCheck, given, settings

from outoforder.config import load_settings
from outoforder.sources.declared import make_reader
from outoforder.sources.parsing import read_file
from tests.sources.hostile import MAX_LINE, REASONS, good_lines, hostile_file, write

EXAMPLES = int(os.environ.get("OOO_FUZZ_EXAMPLES", "150"))
RANGES = load_settings().ingest


def check(path, reader, expected_lines):
    lo, hi = RANGES.plausible_range(reader)
    batches = list(read_file(path, make_reader(reader), plausible_us=(lo, hi), max_line_bytes=MAX_LINE))
    counts = batches[-1].counts
    assert counts.lines == counts.header_lines + counts.blank_lines + counts.accepted + counts.quarantined
    if expected_lines is not None:
        assert counts.lines == expected_lines
    rejects = [r for b in batches for r in b.quarantined.to_pylist()]
    rows = [r for b in batches for r in b.accepted.to_pylist()]
    assert (len(rows), len(rejects)) == (counts.accepted, counts.quarantined)
    for r in rejects:
        assert r["reason"] in REASONS, r
        assert r["line_no"] >= 1
    for r in rows:
        assert lo <= r["event_ts"] <= hi, r
        assert r["arrival_ts"] is None or lo <= r["arrival_ts"] <= hi, r
        for c in ("x", "y", "z", "value"):
            assert r[c] is None or math.isfinite(r[c]), r
        assert r["key"] and r["stream"], r
    return counts


@pytest.mark.parametrize("reader", ["debs2013", "ooo", "debs2015"])
def test_mutated_real_lines_are_accounted_for_and_accepted_rows_are_valid(reader, tmp_path, data_dir):
    templates = good_lines(reader)
    seen = {"accepted": 0, "quarantined": 0}

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip
    @given(hostile_file(reader, templates))
    def fuzz(file):
        content, lines = file
        counts = check(write(tmp_path, "fuzz.bin", content), reader, lines)
        seen["accepted"] += counts.accepted
        seen["quarantined"] += counts.quarantined

    fuzz()
    # the mutations must exercise both sides, or the properties above prove little
    assert seen["accepted"] > 0 and seen["quarantined"] > 0, seen
