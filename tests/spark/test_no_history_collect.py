"""A guard: no stage brings the history to the driver.

Spark refuses to return more than ``spark.driver.maxResultSize`` of task results to the driver in
one action. Bronze here holds a long history, megabytes if it were collected, and every stage runs
with that limit set to 512 kB: a stage that collects per tuple or per pair of the history fails
here, while what is small by construction (per period, per window, per parameter) fits. Every
stream stage processes the whole history, in one large interval and a small one.
"""

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest

from outoforder.sources.disorder import inject
from outoforder.stages.aggregate.repair import repair as agg_repair
from outoforder.stages.aggregate.spec import AggJob
from outoforder.stages.aggregate.stream import AggregateStream
from outoforder.stages.aggregate.validate import validate_aggregate as agg_validate
from outoforder.stages.context import StageContext
from outoforder.stages.join.repair import repair as join_repair
from outoforder.stages.join.spec import JoinJob
from outoforder.stages.join.stream import JoinStream
from outoforder.stages.join.validate import validate_join as join_validate
from outoforder.stages.stats import source_stats
from outoforder.stages.topk.spec import TopKJob
from outoforder.stages.topk.stream import TopKStream
from outoforder.stages.topk.validate import validate_topk as topk_validate

pytestmark = [pytest.mark.spark, pytest.mark.delta, pytest.mark.integration]

SOURCE = "test/long-history"
N = 50_000  # arrivals, one per ms: 50 s (about 1.5 MB for the columns the stages read)
T0 = 1_700_000_000_000_000
STEP = 1_000
LIMIT = "512k"


@contextmanager
def max_result_size(spark, size: str) -> Iterator[None]:
    """``spark.driver.maxResultSize`` for the actions started inside (read per task set).

    A broadcast join also sends its small side through the driver, bounded by the broadcast
    threshold (10 MB by default, under the 64 MB of the scale benchmark): the threshold is lowered
    to a quarter of the limit, so that only a collect, never a broadcast, can exceed it.
    """
    conf = spark.sparkContext._jsc.sc().conf()
    before = conf.get("spark.driver.maxResultSize", "1g")
    thresholds = ("spark.sql.autoBroadcastJoinThreshold", "spark.sql.adaptive.autoBroadcastJoinThreshold")
    sql_before = {k: spark.conf.get(k, None) for k in thresholds}
    conf.set("spark.driver.maxResultSize", size)
    for k in thresholds:
        spark.conf.set(k, "128k")
    try:
        yield
    finally:
        conf.set("spark.driver.maxResultSize", before)
        for k, v in sql_before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def history(n=N, seed=11):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, n * STEP, n)) + 10_000_000_000
    o = inject(ts, "lognormal:mu=-4,sigma=1.2,late_prob=0.4", seed).order
    return pd.DataFrame(
        {
            "stream": np.where(rng.random(n) < 0.4, "ball", "team_a")[o],
            "event_ts": ts[o],
            "x": rng.uniform(0, 50, n)[o],
            "y": rng.uniform(0, 50, n)[o],
            "value": np.round(rng.gamma(2.0, 3.0, n), 3)[o],
            "key": rng.choice([f"s{i}" for i in range(20)], n)[o],
        }
    )


def test_the_limit_stops_a_collect_of_the_history(spark, settings, load_bronze):
    """The guard itself: with the limit in force, collecting the history fails."""
    from outoforder.io import delta
    from outoforder.io.tables import BRONZE

    load_bronze(history(), SOURCE)
    arrivals = delta.read(spark, BRONZE, settings.lake_root).select(
        "arrival_seq", "event_ts", "stream", "key"
    )
    with max_result_size(spark, LIMIT), pytest.raises(Exception, match="maxResultSize"):
        arrivals.toPandas()
    assert len(arrivals.limit(1000).toPandas()) == 1000  # a small collect passes


def test_every_stage_runs_over_a_long_history_without_collecting_it(spark, settings, load_bronze):
    load_bronze(history(), SOURCE)
    end = T0 + N * STEP
    recent = end - 4_000 * STEP
    # the join adapts inside its pass, in a task: the driver gets the operator's scalars only
    join = JoinJob(
        s_streams=("team_a",), window_us=50_000, theta=2.0, period_us=250_000, interval_us=50_000, q_user=0.9
    )
    agg = AggJob(window_us=2_000_000, slide_us=1_000_000, gamma_us=5_000_000)
    topk = TopKJob(k=3, window_us=1_000_000, slide_us=500_000, n=3, m=3, initial_cache_us=200_000)
    with max_result_size(spark, LIMIT):
        stats = source_stats(spark, settings, SOURCE)
        assert stats["overall"]["rows"] == N and stats["n_keys"] == 20

        stream = JoinStream(StageContext.of(spark, settings, SOURCE, join))
        joined = stream.run(T0, recent)
        assert joined is not None and joined.new_pairs > 1_000 and joined.decisions > 10
        assert stream.run(T0, end, catch_up=True) is not None
        join_validate(StageContext.of(spark, settings, SOURCE, join), end, fail=False)
        fixed = join_repair(StageContext.of(spark, settings, SOURCE, join), end)
        assert fixed.added == fixed.missing

        aggregates = AggregateStream(StageContext.of(spark, settings, SOURCE, agg))
        aggregates.run(T0, recent)
        aggregates.run(T0, end, catch_up=True)
        agg_repair(StageContext.of(spark, settings, SOURCE, agg), force=True)
        agg_validate(StageContext.of(spark, settings, SOURCE, agg), fail=False)

        top = TopKStream(StageContext.of(spark, settings, SOURCE, topk))
        top.run(T0, recent)
        last = top.run(T0, end, catch_up=True)
        assert last is not None and last.windows > 0
        topk_validate(StageContext.of(spark, settings, SOURCE, topk), fail=False)

        from outoforder.quality.report import build_reports

        assert all(p.exists() for p in build_reports(spark, settings, "guard", recent, end))
