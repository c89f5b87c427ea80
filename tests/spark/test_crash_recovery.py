"""Crash recovery: a stage killed with SIGKILL in the middle of its writes, rerun, gives the same lake.

One trial of every stage here, each at a kill point drawn from a fixed seed (so a failure
reproduces): the stage runs uninterrupted once (the reference), then again on a copy of the lake
it started from, as a process of its own killed after some of its commits, then to completion;
every table must equal the reference's. The runs that are not killed (the preparation, the
reference, the rerun) run the same command lines in this process, on the tests' session: only the
killed run needs a process (and a JVM) of its own. The reliability run
(``bash infra/bench.sh reliability``) runs 20 per stage at kill points of many seeds, every run a
process. See :mod:`benchmarks.reliability`.
"""

import pytest

from benchmarks import reliability
from tests import sparkconf

pytestmark = [pytest.mark.spark, pytest.mark.delta, pytest.mark.integration]

# every stage that writes the lake from bronze on (ingest-kafka, which needs a broker, runs in the
# reliability run only)
STAGES = (
    "ingest",
    "join-stream",
    "join-repair",
    "aggregate-stream",
    "aggregate-repair",
    "topk-stream",
    "theta-join",
)


@pytest.fixture(scope="module")
def prepared(spark, tmp_path_factory):
    # the stage processes with the tests' Spark settings (the reliability run keeps the production ones)
    conf = sparkconf.TEST_SPARK_CONF if sparkconf.tiny() else None
    work = tmp_path_factory.mktemp("crash") / "work"
    return reliability.prepare(spark, work, STAGES, seconds=1.0, spark_conf=conf, in_process=True)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", STAGES)
def test_a_stage_killed_mid_write_reruns_to_the_same_tables(spark, prepared, name):
    stage = next(s for s in prepared.stages if s.name == name)
    seed = 20_261_123 + STAGES.index(name)  # kills the stage after some of its commits, before its last
    (trial,) = reliability.crash_trials(spark, prepared, stage, trials=1, seed=seed)
    assert trial["rerun_rc"] == 0, (seed, trial.get("rerun_tail"))
    assert trial["same_tables"], (seed, trial)
    assert trial["killed"] or trial["kill_after_commit"] == trial["reference_commits"] - 1, (seed, trial)
