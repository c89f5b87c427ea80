"""The Kafka ingest's arrival order, without Spark: runs rank records as a global sort would.

``ingest-kafka`` reads a batch twice. The first pass cuts each topic partition's records, in offset
order, into runs (stretches of one log-append time; :func:`record_runs`); the runs are sorted and
counted, on the driver (:func:`record_meta`, :func:`rank_runs`, looked up by
:func:`numbered_records`) or, for a large batch, per share of Spark's sort (:func:`runs_before`,
one carry per share). The second pass parses
the records where Spark read them (:func:`parse_records`), each with its run and place in it.
Here both passes run the way the stage runs them and every record's number is compared with its
rank in the sort by (log-append time, partition, offset): equal for any partition count, chunk
size and split of the sorted runs, also where a partition's times go back (a broker's clock).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.errors import InputError
from outoforder.sources.declaration import parse_declaration
from outoforder.sources.declared import DeclaredReader
from outoforder.sources.declared_checks import check_sample
from outoforder.stages.ingest.tasks import (
    META_SCHEMA,
    NUMBERED_SCHEMA,
    RECORD_SCHEMA,
    RUN_SCHEMA,
    numbered_records,
    parse_records,
    rank_runs,
    record_meta,
    record_runs,
    runs_before,
)

DECL = parse_declaration(
    "yard",
    {"format": "jsonl", "stream": "s", "key": "k", "event_time": {"column": "t", "unit": "us"},
     "plausible_event_us": [0, 10**12]},
)  # fmt: skip
READER = DeclaredReader(DECL, DECL.columns_used()).spec()


@st.composite
def partition(draw: st.DrawFn, p: int, back: bool) -> list[tuple[int, int, int, bytes]]:
    """(log-append time, partition, offset, payload) in offset order; ``back``: times may go back."""
    n = draw(st.integers(0, 30))
    moves = [0, 0, 0, 1, 2, 50, -1, -3] if back else [0, 0, 0, 1, 2, 50]
    steps = draw(st.lists(st.sampled_from(moves), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 5]), min_size=n, max_size=n))
    times, offsets = np.cumsum(steps) + 1000, np.cumsum(gaps) + draw(st.integers(0, 100))
    bad = draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=3))
    out = []
    for i in range(n):
        body = b"{oops" if i in bad else json.dumps({"k": f"k{i % 3}", "t": int(times[i]) - 7}).encode()
        out.append((int(times[i]), p, int(offsets[i]), b"" if i % 11 == 10 else body))
    return out


def _batches(records: list[tuple[int, int, int, bytes]], chunk: int) -> list[pa.RecordBatch]:
    whole = pa.record_batch(
        {"partition": pa.array([r[1] for r in records], pa.int32()),
         "offset": pa.array([r[2] for r in records], pa.int64()),
         "ts_us": pa.array([r[0] for r in records], pa.int64()),
         "value": pa.array([r[3] for r in records], pa.binary())}
    )  # fmt: skip
    return [whole.slice(i, chunk) for i in range(0, len(records), chunk)]


def task_output(records: list[tuple[int, int, int, bytes]], chunk: int, parse_chunk: int = 64) -> pa.Table:
    return pa.Table.from_batches(
        list(parse_records(iter(_batches(records, chunk)), READER, 0, 10**12, parse_chunk)), RECORD_SCHEMA
    )


def starts(
    tasks: list[list[tuple[int, int, int, bytes]]], chunk: int, shares: int
) -> dict[tuple[int, int], int]:
    """(partition, run) -> records before it, as the stage's first pass gives it."""
    runs = pa.Table.from_batches(
        [b for recs in tasks for b in record_runs(iter(_batches(recs, chunk)))], RUN_SCHEMA
    )
    order = sorted(range(runs.num_rows), key=lambda i: (runs["arrival_ts"][i].as_py(),
                   runs["partition"][i].as_py(), runs["run"][i].as_py()))  # fmt: skip
    ordered = runs.take(pa.array(order, pa.int64()))
    cuts = np.linspace(0, ordered.num_rows, shares + 1).astype(int)
    before: dict[tuple[int, int], int] = {}
    carried = 0
    for task, (a, b) in enumerate(itertools.pairwise(cuts)):
        share = ordered.slice(a, b - a)
        for out in runs_before(iter([x for x in share.to_batches() if x.num_rows]), task):
            for r in out.to_pylist():
                before[(r["partition"], r["run"])] = carried + r["within"]
        carried += sum(share["count"].to_pylist())
    assert carried == sum(map(len, tasks))  # every record, blank ones too, is in one run
    return before


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 9), st.integers(1, 9), st.integers(1, 3), st.booleans(), st.data())
def test_runs_rank_the_records_as_the_sort_by_arrival_does(
    partitions, chunk, parse_chunk, shares, back, data
):
    tasks = [data.draw(partition(p, back)) for p in range(partitions)]
    before = starts(tasks, chunk, shares)
    numbered = {
        (r["partition"], r["run"], r["place"]): before[(r["partition"], r["run"])] + r["place"] + 1
        for recs in tasks
        for r in task_output(recs, chunk, parse_chunk).to_pylist()
    }
    # the definition: rank in the sort of every record by (time, partition, offset), 1-based; rows and
    # rejects are numbered, blank payloads are not
    # the driver's ranking (a batch small enough): one metadata pass, the parsing tasks look runs up
    meta = pa.Table.from_batches(
        [b for recs in tasks for b in record_meta(iter(_batches(recs, chunk)), 2)], META_SCHEMA
    )
    ranked, total = rank_runs(meta)
    assert total == sum(map(len, tasks))
    assert sorted(meta.filter(pa.compute.equal(meta["count"], 0))["run"].to_pylist()) == sorted(
        r[2] for recs in tasks for r in recs[:2]
    )  # each task's first two records' payloads, for the declaration's check
    here = {
        (r["partition"], r["run"], r["place"]): r["before"] + r["place"] + 1
        for recs in tasks
        for b in numbered_records(iter(_batches(recs, chunk)), READER, 0, 10**12, parse_chunk, ranked)
        for r in pa.Table.from_batches([b], NUMBERED_SCHEMA).to_pylist()
    }
    assert here == numbered
    everything = sorted(r[:3] for recs in tasks for r in recs)
    rank = {(p, o): i for i, (_, p, o) in enumerate(everything, start=1)}
    expected = {}
    for recs in tasks:
        run, place, last = None, 0, None
        for t, p, o, body in recs:
            if last != (t, p):
                run, place, last = o, 0, (t, p)
            else:
                place += 1
            if body:
                expected[(p, run, place)] = rank[(p, o)]
    assert numbered == expected


def test_a_run_goes_on_across_chunks_and_ends_where_the_time_changes():
    records = [(1000, 0, 5, b"a"), (1000, 0, 6, b"b"), (999, 0, 8, b"c"), (1000, 0, 9, b"d")]
    for chunk in (1, 2, 3, 4):
        runs = pa.Table.from_batches(list(record_runs(iter(_batches(records, chunk)))), RUN_SCHEMA)
        assert runs.to_pylist() == [
            {"partition": 0, "run": 5, "arrival_ts": 1000, "count": 2},
            {"partition": 0, "run": 8, "arrival_ts": 999, "count": 1},
            {"partition": 0, "run": 9, "arrival_ts": 1000, "count": 1},
        ]


def test_an_event_time_ahead_of_its_log_append_time_beyond_the_skew_is_quarantined():
    skew_us = int(DECL.max_clock_skew_s * 1_000_000)
    ahead = [json.dumps({"k": "a", "t": 1000 + skew_us + d}).encode() for d in (1, 0)]
    records = [(1000, 0, 5, b'{"k":"a","t":900}'), (1000, 0, 6, ahead[0]), (1000, 0, 7, ahead[1])]
    for chunk in (1, 3):
        out = task_output(records, chunk).to_pydict()
        kinds = list(zip(out["kind"], out["reason"], strict=True))
        assert sorted(kinds, key=str) == sorted(
            [("row", None), ("row", None), ("reject", "arrival_before_event")], key=str
        )
        detail = next(d for d in out["detail"] if d)
        assert (
            detail.startswith("the log-append time is 300 s before the event time") and "offset 6" in detail
        )


def test_a_batch_whose_sample_does_not_fit_is_quarantined_not_a_stop(caplog):
    # a file that does not fit waits untouched; a topic cannot set records aside, so a stop would wedge it
    from outoforder.stages.ingest.kafka import _reader

    bad = [json.dumps({"k": "a", "t": "yesterday"}) for _ in range(50)]
    with pytest.raises(InputError, match="none of the first 50 records fits"):
        check_sample(DeclaredReader(DECL, DECL.columns_used()), bad, "yard#1")
    reader = _reader(DECL, bad, "yard#1")
    assert "none of the first 50 records fits the declaration" in caplog.text
    records = [(1000, 0, i, b.encode()) for i, b in enumerate(bad[:3])] + [(1001, 0, 9, b'{"k":"a","t":5}')]
    out = pa.Table.from_batches(
        list(parse_records(iter(_batches(records, 64)), reader.spec(), 0, 10**12, 64)), RECORD_SCHEMA
    ).to_pydict()
    got = sorted(zip(out["kind"], out["reason"], strict=True))
    assert got == [("reject", "not_numeric")] * 3 + [("row", None)]
