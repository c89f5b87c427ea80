"""The main job (the ``demo`` stage) end to end, once, on the embedded default: what each step returned.

It runs on the first lines of every shared dataset (the whole files' figures are the readers'
tests, tests/sources/test_readers.py) and a 1.5 s replay (the shortest of this seed in which the
θ-join finds pairs). Each step's idempotence is tested with its stage (the stage tests,
test_idempotence.py), ingest on a Spark cluster over MinIO with PostgreSQL metadata by
tests/airflow/test_scale_out.py, and the ``pipeline`` DAG's wiring by
tests/airflow/test_dag_params.py.
"""

import ast
import gzip
from itertools import islice
from pathlib import Path

import pytest

from outoforder.config import load_settings
from outoforder.stages import demo
from outoforder.stages.cli import main
from outoforder.stages.context import StageContext
from outoforder.stages.ingest.replay import replay_source
from tests import sparkconf

pytestmark = [pytest.mark.spark, pytest.mark.delta, pytest.mark.integration]

DEMO = '[demo]\nsynthetic_seconds = 1.5\npreset = "qjoin_d1"\n[ingest]\nbatch_rows = 50000\n'
LINES = 1_500  # of each shared dataset


def _head(src: Path, dst: Path, lines: int) -> None:
    """The first ``lines`` lines of a (gzipped) text file, written the same way."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if src.suffix == ".gz" else open
    with (
        opener(src, "rt", encoding="utf-8", newline="") as fin,
        opener(dst, "wt", encoding="utf-8", newline="") as fout,
    ):
        fout.writelines(islice(fin, lines))


def _suites(results):
    return {s.suite: s.success for s in results}


@pytest.fixture(scope="module")
def ran(tmp_path_factory, spark, data_dir):
    """The main job once on a lake of its own (the session's Spark): its settings and results."""
    from outoforder.sources import catalog

    folder = tmp_path_factory.mktemp("main-job")
    data = folder / "data"
    for d in catalog.BUILTIN:
        _head(d.path(data_dir), d.path(data), LINES)
    config = folder / "demo.toml"
    config.write_text(f'[lake]\nroot = "{folder / "lake"}"\n[data]\nshared_dir = "{data}"\n' + DEMO)
    settings = load_settings(str(config))
    with sparkconf.settings_of(spark, settings.session_conf()):  # the production settings, as shipped
        return settings, demo.run(StageContext("demo", settings, session=spark), run_name="main-job-test")


def test_the_main_job_ingests_everything_and_reports_the_datasets_disorder(ran):
    _, results = ran
    assert list(results) == list(demo.STEPS)
    ingested = results["ingest"]
    assert len(ingested) == 9 and all(s.quarantined == 0 and s.accepted > 0 for s in ingested)
    stats = {r["source"]: r["overall"] for r in results["stats"]}
    assert all(stats[s.source]["rows"] == s.accepted for s in ingested)
    assert stats["ooo/d-1"]["late"] > 0 and stats["debs2015/first10004"]["late"] > 0  # out of order
    replay = results["replay"]
    assert round(100 * replay["report"]["target"]["late_frac"], 2) == 83.41  # the qjoin_d1 preset
    assert replay["ingest"].accepted == replay["report"]["tuples"]
    assert _suites(results["bronze"])["bronze_accounting"]


def test_every_operator_runs_as_the_pipeline_runs_it_and_passes_its_checks(ran):
    settings, results = ran
    source = replay_source("qjoin_d1", 1.5, settings.demo.seed)
    join = results["join"]
    assert set(join["methods"]) >= {"qjoin-learned", "mp-kslack"} and join["true_pairs"] > 0
    stream = results["stream-join"]
    assert stream["intervals"] and sum(s.arrivals for s in stream["intervals"]) > 0
    # P = 5 s: a 1.5 s replay closes no period, so the join's checks give no verdict (not a pass)
    assert stream["suites"] == []
    aggregates = results["aggregates"]
    # the final repair leaves every window exact (on this short replay there may be nothing left to repair)
    final = aggregates["final_repair"]
    assert aggregates["intervals"] and (final.ran or "no pending" in final.reason)
    assert _suites(aggregates["suites"])["agg_results"] and _suites(aggregates["suites"])["agg_quality"]
    theta = results["theta"]
    assert theta["backfill"].output_rows > 0
    assert _suites(theta["suites"]) == {"theta_completeness": True, "theta_results": True}
    topk = results["topk"]
    assert topk["intervals"] and topk["suites"] == []  # 4 s windows + K 2 s: a 1.5 s replay closes none
    assert (settings.quality.reports_dir / "disorder_stats.json").is_file()
    assert all(s.source == source for s in stream["intervals"] + aggregates["intervals"] + topk["intervals"])


def test_cli_errors_are_one_line_and_exit_2(capsys):
    assert main(["ingest", "--datasets", "nope"]) == 2
    assert "unknown dataset 'nope'" in capsys.readouterr().err
    assert main(["ingest", "--file", "x.csv"]) == 2
    assert "ingest --file needs --reader (a built-in reader, or a source declared" in capsys.readouterr().err
    assert main(["replay", "--model", "gamma:k=1"]) == 2
    assert "unknown delay model" in capsys.readouterr().err
    assert main(["demo", "--steps", "ingest,nope"]) == 2
    assert "unknown demo step nope" in capsys.readouterr().err


def test_the_pipeline_dag_runs_every_demo_step_in_order():
    # dags/pipeline.py takes the steps from the demo module (light to import at parse time)
    tree = ast.parse((Path(__file__).parents[2] / "dags" / "pipeline.py").read_text())
    imported = {
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "outoforder.stages.demo"
        for a in n.names
    }
    assert "STEPS" in imported
