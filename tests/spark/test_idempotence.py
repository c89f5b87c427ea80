"""Idempotence per DAG: re-running a DAG's stages for an interval it processed changes no table.

Each case is the stage commands one run of a DAG executes (its tasks, with the run's interval as
``--start``/``--end`` or ``--until``), on one lake holding a small replay. The first run processes
the interval; then the same run again, and a backfill over the processed range from the job's
first interval, must leave every table's content checksum as it was. The validation log
(``gold/quality_runs``, one row per suite per run) is the one table that grows by design.

The regular tests take a subset of the DAGs (:data:`REGULAR`); ``OOO_IDEMPOTENCE_DAGS=all``
takes all of them.

``ingest_landing`` is the ``ingest`` stage fed from a bucket: its "same content twice is ingested
once" is tested on MinIO in tests/airflow/test_scale_out.py; ``pipeline`` is the main job, whose
rerun is checked in test_main_job.py.
"""

import contextlib
import io
import os

import pytest

from outoforder.io import delta
from outoforder.io.tables import ALL_TABLES, CHECK_POSITIONS, QUALITY_RUNS
from outoforder.stages import state
from outoforder.stages.cli import main

pytestmark = [pytest.mark.spark, pytest.mark.delta, pytest.mark.integration]

SOURCE = "synthetic/qjoin_d1-2s-seed7"
SECOND = 1_000_000
WARN = ("--on-violation", "warn")
TOPK = ("--streams", "team_a,team_b", "--window-s", "1", "--slide-s", "0.5", "--initial-cache-s", "0.5")
TOPK += ("--horizon-s", "1", "--n", "10")
MAINTAINED = ("bronze/arrivals", "bronze/quarantine", "bronze/ingest_log")
THETA = ("--streams", "ball,team_a", "--column", "x", "--predicates", "band:0.01", "--window-s", "1")


def run(config, *args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["--config", str(config), *[str(a) for a in args]])
    assert rc == 0, buf.getvalue()[-3000:]
    return buf.getvalue()


@pytest.fixture(scope="module")
def lake(tmp_path_factory, spark):
    """A lake with a 2 s replay in bronze; its first arrival and the end of the second second."""
    folder = tmp_path_factory.mktemp("idempotence")
    config = folder / "idem.toml"
    config.write_text(
        f'[lake]\nroot = "{folder / "lake"}"\nwork_dir = "{folder / "work"}"\n'
        '[demo]\nsynthetic_seconds = 2.0\npreset = "qjoin_d1"\n[quality]\non_violation = "warn"\n'
        "[ingest]\nfile_rows = 4000\n"  # the replay lands in several files: something to compact
    )
    run(config, "demo", "--steps", "replay")
    from outoforder.config import load_settings

    settings = load_settings(str(config))
    span = state.pending_span(spark, settings, SOURCE, None)
    assert span is not None
    first = span[0]
    return {
        "config": config,
        "root": folder / "lake",
        "t0": first,
        "t1": first + SECOND,
        "t2": first + 2 * SECOND,
    }


def cases(t0, t1, t2):
    """Per DAG: (commands run before, the commands of one run for [t1, t2), a backfill from t0)."""
    src = ("--source", SOURCE)
    span = lambda a, b: ("--start", a, "--end", b)  # noqa: E731
    theta_lo, theta_hi = t0 // SECOND * SECOND, (t2 // SECOND + 1) * SECOND
    return {
        "ingest": (
            [],
            [("ingest", "--datasets", "debs2013/fullgame_head1000"), ("validate-bronze", *WARN)],
            None,
        ),
        "join_stream": (
            [("join-stream", *src, *span(t0, t1))],
            [
                ("join-stream", *src, *span(t1, t2)),
                ("validate-join", *src, "--until", t2, *WARN),
                ("report",),
            ],
            ("join-stream", *src, *span(t0, t2)),  # the job stands at t2: a pass over nothing new
        ),
        "aggregate_stream": (
            [("aggregate-stream", *src, *span(t0, t1))],
            [("aggregate-stream", *src, *span(t1, t2)), ("validate-aggregate", *src, *WARN)],
            ("aggregate-stream", *src, *span(t0, t2)),  # the job stands at t2: nothing new
        ),
        "late_repair": (
            [],
            [("aggregate-repair", *src, "--force"), ("validate-aggregate", *src, *WARN, "--repaired")],
            None,
        ),
        "topk_stream": (
            [("topk-stream", *src, *TOPK, *span(t0, t1))],
            [("topk-stream", *src, *TOPK, *span(t1, t2)), ("validate-topk", *src, *TOPK, *WARN)],
            ("topk-stream", *src, *TOPK, *span(t0, t2), "--every-s", "1"),
        ),
        "theta_backfill": (
            [],
            [
                ("theta-join", *src, *THETA, *span(theta_lo, theta_hi)),
                ("validate-theta", *src, *THETA, *span(theta_lo, theta_hi), "--sample", "1", *WARN),
            ],
            ("theta-join", *src, *THETA, *span(theta_lo, theta_lo + SECOND)),  # one window of the range
        ),
        # compaction and vacuum rewrite files, never content (bronze holds the replay in several files)
        "maintenance": ([], [("maintain", "--tables", *MAINTAINED)], None),
    }


def bronze_files(spark, root):
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, str(root / "bronze" / "arrivals")).detail().first()["numFiles"]


def digests(spark, root):
    return delta.content_digests(
        spark, root, [t for t in ALL_TABLES if t not in (QUALITY_RUNS, CHECK_POSITIONS)]
    )


def changed(a, b):
    return [(t, a[t], b[t]) for t in a if a[t] != b[t]]


# in DAG order: late_repair works on what aggregate_stream wrote
ALL = ["ingest", "join_stream", "aggregate_stream", "late_repair", "topk_stream"]
ALL += ["theta_backfill", "maintenance"]
# The test command takes the aggregate DAGs and maintenance, whose stages' reruns have no test of
# their own: reruns of the other DAGs' stages are tested with each stage (test_ingest_delta,
# test_join_stream, test_topk_stream, test_theta_backfill), a DAG run being its stages' commands.
# OOO_IDEMPOTENCE_DAGS=all (the reliability run) takes every DAG.
REGULAR = ["aggregate_stream", "late_repair", "maintenance"]
DAGS = ALL if os.environ.get("OOO_IDEMPOTENCE_DAGS") == "all" else REGULAR


@pytest.mark.parametrize("dag", DAGS)
def test_rerunning_a_dags_interval_and_backfilling_it_change_no_table(dag, lake, spark):
    before, once, backfill = cases(lake["t0"], lake["t1"], lake["t2"])[dag]
    for cmd in before:
        run(lake["config"], *cmd)
    start, files = digests(spark, lake["root"]), bronze_files(spark, lake["root"])
    for cmd in once:
        run(lake["config"], *cmd)
    first = digests(spark, lake["root"])
    if dag == "maintenance":  # it rewrote bronze into one file, and changed no content doing it
        assert bronze_files(spark, lake["root"]) == 1 < files
        assert changed(start, first) == []
    # a backfill from the job's first interval re-runs this interval too; without one, run it again
    for cmd in [backfill] if backfill is not None else once:
        run(lake["config"], *cmd)
    assert changed(first, digests(spark, lake["root"])) == [], f"a rerun of {dag} changed these"
