"""An operator of one's own, installed beside the built-in ones, gets its stages, Params and contract check.

The toy (tests/toy_operator: a job and stages, a core operator, a Spark step, an entry point) is
put on the Python path only: no file of the project is touched. No Spark here (its Spark step runs
in tests/spark/test_toy_operator.py, its DAG in tests/airflow/test_dag_params.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from outoforder import checks
from outoforder.errors import ConfigError
from outoforder.stages import registry, spec
from outoforder.stages.cli import build_parser, main

TOY = Path(__file__).parent / "toy_operator"


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.syspath_prepend(str(TOY))
    registry.operators.cache_clear()
    yield registry.operator("toy")
    for name in [m for m in sys.modules if m == "toy_ooo" or m.startswith("toy_ooo.")]:
        del sys.modules[name]
    registry.operators.cache_clear()


def test_the_built_in_folders_declare_every_stage_once_and_nothing_else_is_installed():
    names = [s.name for s in registry.stages()]
    assert len(names) == len(set(names)) and "toy-stream" not in names
    assert [op.name for op in registry.operators()] == list(registry.BUILT_IN)
    for op in registry.operators():
        for s in op.stages:
            assert callable(s.handler()), s.name  # every handler imports
    from outoforder.io.tables import ALL_TABLES

    known = {t.name for t in ALL_TABLES}
    for s in registry.stages():
        assert set(s.reads) | set(s.writes) | set(s.judges) <= known, s.name
        assert set(s.judges) <= set(s.reads), s.name  # a check judges what it reads
    # every stream DAG's check judges what its stream stage writes (the Assets view's quality)
    for op in registry.operators():
        if op.check is not None and op.stream is not None:
            assert op.stage(op.check).judges, op.name
            assert set(op.stage(op.check).judges) <= set(op.stage(op.stream).writes), op.name


def test_the_docs_table_of_stages_is_the_registrys():
    text = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text()
    table = text.split("<!-- stages: generated -->\n", 1)[1].split("<!-- stages: end -->", 1)[0]
    assert table == registry.markdown_table(), "regenerate: python -m outoforder.stages stages --markdown"


def test_a_toy_operator_gets_its_cli_stages_with_its_jobs_options(toy, capsys):
    assert not toy.builtin and toy.job is not None
    parsers = build_parser()._subparsers._group_actions[0].choices

    def flags(name):
        return {f for a in parsers[name]._actions for f in a.option_strings}

    stream = {"--source", "--window-s", "--slack-s", "--start", "--end", "--catch-up", "--file"}
    assert stream <= flags("toy-stream")
    assert {"--on-violation", "--run-name", "--since", "--from-judged"} <= flags("validate-toy")
    # the job is built and checked before anything runs, the error naming the flag
    assert main(["toy-stream", "--source", "s", "--window-s", "-1"]) == 2
    assert "--window-s must be > 0" in capsys.readouterr().err
    # a stage without Spark work runs, given its job
    assert main(["validate-toy", "--source", "s", "--slack-s", "0.5"]) == 0
    assert f"validate s (job {toy.job(slack_us=500_000).job_id()})" in capsys.readouterr().out


def test_a_toy_operator_gets_its_dag_params_from_its_job(toy):
    params = spec.dag_params(toy.job, extra=toy.params)
    assert list(params) == ["source", "window_s", "slack_s", "on_violation", "config"]
    assert params["window_s"][0] == 1.0 and params["window_s"][1]["exclusiveMinimum"] == 0
    assert spec.stage_args(toy.job)[2:4] == ["--window-s", "{{ params.window_s }}"]


def test_a_toy_operator_is_checked_against_the_contract_and_a_broken_one_is_caught(toy):
    cases = checks.installed_cases()  # the built-in operators' cases, then the toy's
    assert [c.name for c in cases][-1:] == ["toy-count"] and "qjoin" in [c.name for c in cases]
    checks.check_operator(cases[-1], seeds=range(8))
    (broken,) = registry.load("toy_ooo.core:cases")(drop_late=True)
    with pytest.raises(checks.ContractViolation, match="toy-count: late items differ from its rule: missing"):
        checks.check_operator(broken, seeds=range(8))


def test_two_operators_declaring_one_stage_are_refused(toy, monkeypatch):
    from toy_ooo import spec as toy_spec

    clash = registry.Operator(**{**toy.__dict__, "stages": (*toy.stages, registry.stage("join-stream"))})
    monkeypatch.setattr(toy_spec, "OPERATOR", clash)
    registry.operators.cache_clear()
    with pytest.raises(ConfigError, match="stage 'join-stream' is declared by both join and toy"):
        registry.operators()
