"""The Kafka ingest's arrival order, without Spark: runs rank records as a global sort would.

``ingest-kafka`` parses each topic partition where Spark read it, in offset order, and ranks the
records from their runs (stretches of one log-append time and partition) instead of sorting the
batch. Here the tasks' outputs (:func:`parse_records`) are ranked the way the driver's plan ranks
them (runs sorted, :func:`runs_before` per share, one carry per share) and compared with the rank
of every record in the sort by (log-append time, partition, offset): equal for any partition
count, chunk size and split of the sorted runs. A partition whose times go back is reported
"unsorted" (the stage then sorts the batch first).
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
from outoforder.sources.declared import DeclaredReader, check_sample
from outoforder.stages.ingest.tasks import RECORD_SCHEMA, parse_records, runs_before

DECL = parse_declaration(
    "yard",
    {"format": "jsonl", "stream": "s", "key": "k", "event_time": {"column": "t", "unit": "us"},
     "plausible_event_us": [0, 10**12]},
)  # fmt: skip
READER = DeclaredReader(DECL, DECL.columns_used()).spec()


@st.composite
def partition(draw: st.DrawFn, p: int) -> list[tuple[int, int, int, bytes]]:
    """(log-append time, partition, offset, payload) in offset order: times never go back."""
    n = draw(st.integers(0, 30))
    steps = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 50]), min_size=n, max_size=n))
    gaps = draw(st.lists(st.sampled_from([1, 1, 1, 2, 5]), min_size=n, max_size=n))
    times, offsets = np.cumsum(steps) + 1000, np.cumsum(gaps) + draw(st.integers(0, 100))
    bad = draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=3))
    out = []
    for i in range(n):
        body = b"{oops" if i in bad else json.dumps({"k": f"k{i % 3}", "t": int(times[i]) - 7}).encode()
        out.append((int(times[i]), p, int(offsets[i]), b"" if i % 11 == 10 else body))
    return out


def _batch(records: list[tuple[int, int, int, bytes]]) -> pa.RecordBatch:
    return pa.record_batch(
        {"partition": pa.array([r[1] for r in records], pa.int32()),
         "offset": pa.array([r[2] for r in records], pa.int64()),
         "ts_us": pa.array([r[0] for r in records], pa.int64()),
         "value": pa.array([r[3] for r in records], pa.binary())}
    )  # fmt: skip


def task_output(records: list[tuple[int, int, int, bytes]], pid: int, chunk: int) -> pa.Table:
    return pa.Table.from_batches(
        list(parse_records(iter([_batch(records)]), pid, READER, 0, 10**12, chunk)), RECORD_SCHEMA
    )


def ranks(outputs: list[pa.Table], shares: int) -> dict[tuple[int, int], int]:
    """(pid, local) -> line_no, as the driver's plan gives it; ``shares``: tasks of the runs' sort."""
    every = pa.concat_tables(outputs)
    runs = every.filter(pa.compute.equal(every["kind"], "run"))
    order = sorted(range(runs.num_rows), key=lambda i: (runs["arrival_ts"][i].as_py(),
                   runs["partition"][i].as_py(), runs["offset"][i].as_py()))  # fmt: skip
    ordered = runs.take(pa.array(order, pa.int64()))
    cuts = np.linspace(0, ordered.num_rows, shares + 1).astype(int)
    before: dict[tuple[int, int], int] = {}
    carried = 0
    for task, (a, b) in enumerate(itertools.pairwise(cuts)):
        share = ordered.slice(a, b - a)
        for out in runs_before(iter([x for x in share.to_batches() if x.num_rows]), task):
            for r in out.to_pylist():
                before[(r["pid"], r["run"])] = carried + r["within"] - r["local"] + 1
        carried += sum(share["count"].to_pylist())
    got = {}
    for table in outputs:
        for r in table.filter(pa.compute.is_in(table["kind"], pa.array(["row", "reject"]))).to_pylist():
            got[(r["pid"], r["local"])] = before[(r["pid"], r["run"])] + r["local"]
    return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 9), st.integers(1, 3), st.data())
def test_runs_rank_the_records_as_the_sort_by_arrival_does(partitions, chunk, shares, data):
    tasks = [data.draw(partition(p)) for p in range(partitions)]
    outputs = [task_output(recs, pid, chunk) for pid, recs in enumerate(tasks)]
    assert not any("unsorted" in t["kind"].to_pylist() for t in outputs)
    got = ranks(outputs, shares)
    # the definition: rank in the sort of every record by (time, partition, offset), 1-based
    everything = sorted((r[0], r[1], r[2], pid, local) for pid, recs in enumerate(tasks)
                        for local, r in enumerate(recs, start=1))  # fmt: skip
    expected = {(pid, local): i for i, (*_, pid, local) in enumerate(everything, start=1)}
    blank = {k for k, v in expected.items() if not tasks[k[0]][k[1] - 1][3]}  # neither row nor reject
    assert got == {k: v for k, v in expected.items() if k not in blank}
    runs = sum(int(pa.compute.sum(t.filter(pa.compute.equal(t["kind"], "run"))["count"]).as_py() or 0)
               for t in outputs)  # fmt: skip
    assert runs == sum(map(len, tasks))  # every record, blank ones too, is in one run


def test_a_partition_whose_times_go_back_is_reported_unsorted():
    good = [(1000, 0, 5, b'{"k":"a","t":1}'), (1000, 0, 6, b'{"k":"a","t":2}')]
    assert "unsorted" not in task_output(good, 0, 1)["kind"].to_pylist()
    back = [*good, (999, 0, 7, b'{"k":"a","t":3}')]
    for chunk in (1, 2, 3):  # within a chunk or across chunks
        assert "unsorted" in task_output(back, 0, chunk)["kind"].to_pylist()


def test_an_event_time_ahead_of_its_log_append_time_beyond_the_skew_is_quarantined():
    skew_us = int(DECL.max_clock_skew_s * 1_000_000)
    ahead = [json.dumps({"k": "a", "t": 1000 + skew_us + d}).encode() for d in (1, 0)]
    records = [(1000, 0, 5, b'{"k":"a","t":900}'), (1000, 0, 6, ahead[0]), (1000, 0, 7, ahead[1])]
    for chunk in (1, 3):
        out = task_output(records, 0, chunk).to_pydict()
        kinds = [(k, r) for k, r in zip(out["kind"], out["reason"], strict=True) if k != "run"]
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
        list(parse_records(iter([_batch(records)]), 0, reader.spec(), 0, 10**12, 64)), RECORD_SCHEMA
    ).to_pydict()
    got = sorted((k, r) for k, r in zip(out["kind"], out["reason"], strict=True) if k != "run")
    assert got == [("reject", "not_numeric")] * 3 + [("row", None)]
