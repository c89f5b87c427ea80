"""Disorder statistics on Spark, in one task or in ranges of arrivals, equal the numpy definitions."""

import numpy as np
import pytest

from outoforder.core.disorder import disorder_stats, disorder_stats_by
from outoforder.spark.disorder import disorder_by_scope

pytestmark = [pytest.mark.spark]


@pytest.mark.parametrize("rows_per_task", [2_000_000, 37, 150])
def test_ranges_of_arrivals_give_the_statistics_of_the_whole_source(spark, rows_per_task):
    rng = np.random.default_rng(7)
    n = 400
    ts = (np.arange(n) * 1000 - rng.exponential(3000, n) * (rng.random(n) < 0.3)).astype(np.int64)
    streams = rng.choice(["ball", "team_a", "team_b"], n)
    keys = rng.choice([str(k) for k in range(9)], n)
    seqs = np.sort(rng.choice(10 * n, n, replace=False))  # gaps in arrival_seq, as between files
    df = spark.createDataFrame(
        list(zip(seqs.tolist(), ts.tolist(), streams.tolist(), keys.tolist(), strict=True)),
        "seq long, ts long, stream string, key string",
    )
    got = disorder_by_scope(df, rows_per_task=rows_per_task)
    assert got["all"] == {"": disorder_stats(ts)}
    assert got["stream"] == disorder_stats_by(ts, streams)
    assert got["key"] == disorder_stats_by(ts, keys)
    assert disorder_by_scope(df.limit(0)) == {"all": {}, "stream": {}, "key": {}}
