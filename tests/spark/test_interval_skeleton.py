"""The interval skeleton's rules, on the aggregate stage: reruns write nothing, no interval straddles
the newest processed end, old snapshots are pruned in steps (:mod:`outoforder.stages.interval`)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from outoforder.errors import InputError
from outoforder.io import delta
from outoforder.io.tables import AGG_RESULTS, AGG_STATE, INGEST_LOG
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.context import StageContext
from outoforder.stages.state import states_at

pytestmark = [pytest.mark.spark, pytest.mark.delta]

SOURCE = "test/skeleton"
JOB = AggJob(window_us=50_000, slide_us=10_000, coverage_horizon_us=100_000, initial_k_us=20_000)
T0 = 1_700_000_000_000_000
STEP = 1_000  # arrival_ts step of load_bronze: arrival i at T0 + i·STEP


def arrivals(n=300, seed=2):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 300_000, n)) + 10_000_000_000
    return pd.DataFrame({"stream": "s", "event_ts": ts[rng.permutation(n)], "value": rng.gamma(2.0, 3.0, n)})


def at(i):
    return T0 + i * STEP


def versions(spark, settings):
    from delta.tables import DeltaTable

    return {t.name: DeltaTable.forPath(spark, t.path(settings.lake_root)).history(1).first()["version"]
            for t in (AGG_RESULTS, AGG_STATE)}  # fmt: skip


def test_reruns_write_nothing_straddles_are_refused_or_split_and_snapshots_are_pruned(
    spark, settings, load_bronze
):
    load_bronze(arrivals(), SOURCE)
    stage = AggregateStream(StageContext.of(spark, settings, SOURCE, JOB), keep_snapshots=2, prune_slack=1)
    stage.run(at(0), at(200), every_us=50 * STEP)  # four intervals: the fourth prunes to two
    ends = sorted(r[0] for r in delta.read(spark, AGG_STATE, settings.lake_root).select("as_of_us").collect())
    assert ends == [at(150), at(200)]

    before = versions(spark, settings)
    again = AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run_interval(at(150), at(200))
    assert again.arrivals == 50 and versions(spark, settings) == before  # no commit at all

    with pytest.raises(InputError, match=r"run \[.*\) and \[.*\) instead"):
        AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run_interval(at(150), at(250))
    split = AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run(at(150), at(250))
    assert [(s.start_us, s.end_us) for s in split] == [(at(150), at(200)), (at(200), at(250))]
    results = delta.read(spark, AGG_RESULTS, settings.lake_root).where(F.col("source") == SOURCE)
    assert results.count() == results.select("window_id").distinct().count() > 0

    # the state in force at several instants, in one query: the newest row as of each, whole
    got = states_at(spark, settings, AGG_STATE, SOURCE, JOB.job_id(), [at(249), at(10**6), at(0), at(150)])
    assert [None if g is None else g["as_of_us"] for g in got] == [at(200), at(250), None, at(150)]
    stored = delta.read(spark, AGG_STATE, settings.lake_root).where(F.col("as_of_us") == at(200)).first()
    assert got[0] == stored.asDict()


def test_a_scheduled_run_catches_up_in_whole_steps_and_a_long_quiet_gap_is_one_step(
    spark, settings, load_bronze
):
    # what the stream DAGs ask for (--catch-up): runs whose times drifted or were skipped
    load_bronze(arrivals(), SOURCE)  # arrivals at at(0) … at(299)
    step = 50 * STEP

    def run(start, end):
        got = AggregateStream(StageContext.of(spark, settings, SOURCE, JOB)).run(
            start, end, every_us=step, catch_up=True
        )
        return [(s.start_us, s.end_us) for s in got]

    assert run(at(0), at(50)) == [(at(0), at(50))]  # the job's first run: its own interval
    # a run that starts past where the job stopped, ending off the job's grid: whole steps from
    # where the job stopped; the few µs past the last whole step wait for the next run
    assert run(at(120), at(170) + 7) == [(at(50), at(100)), (at(100), at(150))]
    assert run(at(150) + 7, at(150) + 9) == []  # nothing whole yet
    # long after the last arrival (500 steps later): whole steps up to the newest arrival; the step
    # it falls in may still be filled by a file not ingested yet, so it waits (as for a topic)
    far = at(150) + 500 * step
    assert run(far - step, far) == [(at(150), at(200)), (at(200), at(250))]
    assert run(far - step, far) == []
    # an ingest of the source at `far`: everything that arrived before it is in bronze
    done = [("test-log", "done", 0, SOURCE, "f", "", 0, "r", 0, 0, 0, 0, 0, 0, None, None, far)]
    delta.ensure(spark, INGEST_LOG, settings.lake_root)
    delta.merge_new(
        spark.createDataFrame(done, INGEST_LOG.schema),
        INGEST_LOG,
        settings.lake_root,
        ("ingest_id", "status"),
    )
    assert run(far - step, far) == [(at(250), at(300)), (at(300), far)]  # then one quiet step
    results = delta.read(spark, AGG_RESULTS, settings.lake_root).where(F.col("source") == SOURCE)
    assert results.count() == results.select("window_id").distinct().count() > 0


def test_a_run_over_years_without_arrivals_steps_only_where_arrivals_are(spark, settings, load_bronze):
    # four arrivals a year apart: a minute's steps would be two million intervals
    year = 365 * 86_400 * 1_000_000
    load_bronze(arrivals(n=4), "test/gap", step=year)
    minute = 60_000_000
    got = AggregateStream(StageContext.of(spark, settings, "test/gap", JOB)).run(every_us=minute)
    spans = [(s.start_us, s.end_us, s.arrivals) for s in got]
    assert len(spans) == 7  # four minutes with an arrival, three quiet stretches between them
    assert [a for _, _, a in spans] == [1, 0, 1, 0, 1, 0, 1]
    assert all(hi == lo2 for (_, hi, _), (lo2, _, _) in itertools.pairwise(spans))  # contiguous
    assert all((lo - T0) % minute == 0 for lo, _, _ in spans)  # on the job's grid
