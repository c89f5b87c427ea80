"""Every stage, declared once in its operator's folder: the CLI, DAG Params, main job's steps derive from it.

A folder under ``outoforder/stages/`` declares its stages in its ``spec`` module as one
:class:`Operator` named ``OPERATOR``: each :class:`Stage` with its name, its handler (imported
only when the stage runs), the job it takes, its own options and the tables it reads and writes;
the operator's stream DAG (which stage runs each interval, which one checks it); the steps it
adds to the main job; and the contract cases of its core operators. An operator of your own,
in a package of your own, is found the same way through the ``outoforder.operators`` entry point
group (``toy = mypackage.spec:OPERATOR``): it gets its CLI stages, its DAG and Params
(``dags/operators.py``), a place in the main job and the contract check, with no file of this
project touched.

Standard library only: the DAG files import the declarations when Airflow parses them.

>>> [s.name for s in operator("topk").stages]
['topk-stream', 'validate-topk']
>>> stage("validate-join").job.__name__
'JoinJob'
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from outoforder.errors import ConfigError
from outoforder.stages.options import Arg
from outoforder.stages.spec import Job, Setting

log = logging.getLogger(__name__)

ENTRY_POINTS = "outoforder.operators"
# the folders of this package, in the order the CLI lists them and the main job runs their steps
BUILT_IN = ("ingest", "join", "aggregate", "theta", "topk", "operations")


def load(target: str) -> Any:
    """``"package.module:attribute"`` imported."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        msg = f"{target!r} is not module:attribute"
        raise ConfigError(msg)
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Stage:
    """One ``python -m outoforder.stages <name>`` stage.

    ``run`` names the handler (``module:function``), called with the :class:`StageContext` and the
    parsed options and returning the exit status. A stage with a ``job`` takes the job's options
    (but ``exclude``) and, if ``source``, a required ``--source``; the job is built and checked
    before Spark starts. ``reads`` and ``writes`` are table names (``silver/topk_state``);
    ``judges``, of a check, the tables whose quality it measures (their asset events carry its
    verdict, outoforder_airflow's ``QualityEvent``).
    """

    name: str
    help: str
    run: str
    job: type[Job] | None = None
    args: tuple[Arg, ...] = ()
    source: bool = True
    exclude: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    judges: tuple[str, ...] = ()

    def handler(self) -> Callable[..., int | None]:
        """The handler, imported."""
        func: Callable[..., int | None] = load(self.run)
        return func


@dataclass(frozen=True)
class Step:
    """A step of the main job: ``run`` (``module:function``) is called with the context and the run name."""

    name: str
    run: str


@dataclass(frozen=True)
class Operator:
    """What one folder declares: its stages, and for an operator with a job, its DAG and checks.

    ``stream`` and ``check`` name the stages a stream DAG runs for each arrival interval (its
    ``[dags.<name>]`` table sets their Params' defaults); ``params`` are DAG Params beyond the
    job's; ``steps`` its part of the main job; ``contract`` (``module:function``) returns the
    :class:`outoforder.checks.Case` of each of its core operators.
    """

    name: str
    summary: str
    stages: tuple[Stage, ...]
    job: type[Job] | None = None
    stream: str | None = None
    check: str | None = None
    params: tuple[Setting, ...] = ()
    steps: tuple[Step, ...] = ()
    contract: str | None = None

    @property
    def builtin(self) -> bool:
        """A folder of this package (names are unique, so an installed operator never has one of theirs)."""
        return self.name in BUILT_IN

    def stage(self, name: str) -> Stage:
        """One of its stages by name."""
        for s in self.stages:
            if s.name == name:
                return s
        msg = f"operator {self.name} has no stage {name!r}"
        raise ConfigError(msg)


@functools.cache
def operators() -> tuple[Operator, ...]:
    """The built-in folders' declarations, then those installed under the entry point group."""
    out = [_declared(f"outoforder.stages.{name}.spec:OPERATOR") for name in BUILT_IN]
    out += [_declared(ep.value) for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name)]
    _check(out)
    return tuple(out)


def _declared(target: str) -> Operator:
    op = load(target)
    if not isinstance(op, Operator):
        msg = f"{target} is a {type(op).__name__}, not an outoforder.stages.registry.Operator"
        raise ConfigError(msg)
    return op


def _check(ops: list[Operator]) -> None:
    """Names are unique; a stream DAG's stages are the operator's, with its job and the interval options."""
    seen: dict[str, str] = {}
    for op in ops:
        for s in op.stages:
            if s.name in seen:
                msg = f"stage {s.name!r} is declared by both {seen[s.name]} and {op.name}"
                raise ConfigError(msg)
            seen[s.name] = op.name
        for role, needs in (
            (op.stream, {"start", "end", "catch_up"}),
            (op.check, {"since", "from_judged", "until"}),
        ):
            if role is None:
                continue
            s = op.stage(role)
            missing = needs - {a.dest for a in s.args}
            if s.job is not op.job or missing:  # what the stream DAG passes (outoforder_airflow.operators)
                msg = f"operator {op.name}: its DAG's stage {role} must take its job and {sorted(needs)}"
                raise ConfigError(msg)
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        msg = f"two operators share a name: {names}"
        raise ConfigError(msg)


def operator(name: str) -> Operator:
    """An operator by name."""
    for op in operators():
        if op.name == name:
            return op
    msg = f"unknown operator {name!r} (operators: {', '.join(o.name for o in operators())})"
    raise ConfigError(msg)


def stages() -> Iterator[Stage]:
    """Every stage, in the CLI's order."""
    for op in operators():
        yield from op.stages


def stage(name: str) -> Stage:
    """A stage by name."""
    for s in stages():
        if s.name == name:
            return s
    msg = f"unknown stage {name!r}"
    raise ConfigError(msg)


def steps() -> tuple[Step, ...]:
    """The main job's steps, in order."""
    return tuple(step for op in operators() for step in op.steps)


def markdown_table() -> str:
    """Every stage as a Markdown table: operator, stage, job, what it reads and writes, what it does.

    ``docs/architecture.md`` holds this table; ``python -m outoforder.stages stages --markdown`` prints it.
    """
    rows = ["| operator | stage | job | reads | writes | what it does |", "|---|---|---|---|---|---|"]
    for op in operators():
        for s in op.stages:
            job = s.job.__name__ if s.job is not None else ""
            reads, writes = (", ".join(f"`{t}`" for t in ts) for ts in (s.reads, s.writes))
            rows.append(f"| {op.name} | `{s.name}` | {job} | {reads} | {writes} | {s.help} |")
    return "\n".join(rows) + "\n"
