"""One declaration per job parameter; the CLI flags, the DAG Params, validation and the job id derive from it.

A *job* is what a stage computes and how it is judged (the stream join's streams, window, θ and
recall target; an aggregate and its (ε, δ); ...). Each kind of job is a frozen dataclass deriving
from :class:`Job` whose fields are declared with :func:`param`: name, type (the annotation),
default, unit, help, bounds, and whether the field identifies the job. Everything else is derived:

- the command line options (:func:`add_options`): ``window_us`` with unit ``s`` is ``--window-s``,
  given in seconds (every duration at the interface is) and stored in microseconds (inside);
- the Airflow DAG Params (:func:`dag_params`: plain JSON-schema keyword arguments for
  ``airflow.sdk.Param``) and the stage arguments a DAG passes (:func:`stage_args`);
- validation of every value against its bounds and choices (:meth:`Job.__post_init__`), with an
  error that names the option; an option's former name fails, naming the new one;
- the job id (:meth:`Job.job_id`): a digest of the identifying fields, so two jobs that differ only
  in how they run (a θ-join method, a repair's Γ) share their tables.

Standard library only: DAG files import the job declarations when Airflow parses them.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Toy(Job):
...     PREFIX = "ty"
...     window_us: int = param(500_000, unit="s", help="window size", minimum=0, formerly=("window_ms",))
...     streams: tuple[str, ...] = param(("a", "b"), help="streams (comma-separated)")
>>> [o.flag for o in Toy.options()]
['--window-s', '--streams']
>>> Toy.from_options({"window_s": "0.25", "streams": "c"})
Toy(window_us=250000, streams=('c',))
>>> Toy().option_values()
{'window_s': 0.5, 'streams': 'a,b'}
>>> Toy(window_us=-1)
Traceback (most recent call last):
...
outoforder.errors.ConfigError: --window-s must be >= 0, got -1e-06
>>> Toy.from_options({"window_ms": 250})
Traceback (most recent call last):
...
outoforder.errors.ConfigError: window_ms is now window_s (in seconds)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from outoforder.errors import ConfigError

# microseconds per unit an option is given in (fields with a unit hold µs)
UNITS = {"ms": 1_000, "s": 1_000_000}
_META = "outoforder.spec"


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """What :func:`param` records about a field (see :class:`Option` for what derives from it)."""

    help: str
    unit: str = ""
    option: str | None = ""  # the option's name without its unit; "" = the field's, None = no option
    identifies: bool = True
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    formerly: tuple[str, ...] = ()  # option names it had: refused, naming this one
    key: str = ""  # its key in the job id's digest; "" = the field's name
    renamed: tuple[tuple[str, str], ...] = ()  # (old, new) choice values: the old refused, naming the new


def param(
    default: Any,
    *,
    help: str,
    unit: str = "",
    option: str | None = "",
    identifies: bool = True,
    choices: Sequence[str] = (),
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    formerly: Sequence[str] = (),
    key: str = "",
    renamed: Mapping[str, str] | None = None,
) -> Any:
    """Declare a job field: its default (in the field's units: µs for a unit of ms or s) and the rest.

    ``option=None`` keeps a field out of the CLI and the DAGs (a constant that still identifies the
    job); ``above``/``below`` are exclusive bounds; bounds are in the option's unit. ``formerly``
    lists option names it had (``window_ms``): given, they fail naming the new one. ``key`` keeps a
    renamed field's place in the job id (so the jobs in existing tables keep their ids);
    ``renamed`` maps old choice values to new ones, refused the same way.
    """
    if unit and unit not in UNITS:
        msg = f"unknown unit {unit!r} (known: {', '.join(UNITS)})"
        raise ConfigError(msg)
    spec = ParamSpec(
        help, unit, option, identifies, tuple(choices), minimum, maximum, above, below,
        tuple(formerly), key, tuple((renamed or {}).items()),
    )  # fmt: skip
    return dataclasses.field(default=default, metadata={_META: spec})


@dataclasses.dataclass(frozen=True)
class Option:
    """A job field as users see it: the CLI's ``--name`` and the DAG's ``params.name``, in its unit."""

    field: str
    name: str
    kind: str  # "int", "float", "str" or "list" (a tuple of strings, comma-separated)
    optional: bool  # None is a value (an empty string on the command line)
    scale: int  # µs per unit; 1 without a unit
    default: Any  # in the option's unit
    spec: ParamSpec

    @property
    def flag(self) -> str:
        """The command-line flag."""
        return "--" + self.name.replace("_", "-")

    def unit_words(self) -> str:
        """`` (in seconds)`` for an option with a unit, else nothing."""
        return {"s": " (in seconds)", "ms": " (in milliseconds)"}.get(self.spec.unit, "")

    def parse(self, text: str) -> Any:
        """A command-line (or templated DAG) value in the option's unit; "" or "None" is None if optional."""
        if self.optional and text.strip() in ("", "None", "none", "null"):
            return None
        if self.kind in ("list", "str"):
            return text
        try:
            value = float(text) if self.kind == "float" or self.scale != 1 else int(text)
        except ValueError as e:
            msg = f"{self.flag} takes a number, got {text!r}"
            raise argparse.ArgumentTypeError(msg) from e
        if not self._representable(value):
            msg = f"{self.flag} takes a finite number within range, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    def _representable(self, value: float) -> bool:
        """Finite, and held as a 64-bit integer in the field's unit where it is one."""
        if not math.isfinite(value):
            return False
        return (self.kind == "float" and self.scale == 1) or abs(value * self.scale) < 2**63

    def to_field(self, value: Any) -> Any:
        """An option value (number or string, in the option's unit) as the field holds it."""
        if value is None:
            if self.optional:
                return None
            msg = f"{self.flag} needs a value"
            raise ConfigError(msg)
        try:
            if self.kind == "list":
                items = value.split(",") if isinstance(value, str) else value
                return tuple(s.strip() for s in items if str(s).strip())
            if self.kind == "str":
                return str(value)
            if isinstance(value, bool) or not self._representable(float(value)):
                msg = f"{self.flag} takes a finite number within range, got {value!r}"
                raise ConfigError(msg)
            if self.scale != 1:
                return round(float(value) * self.scale)
            return float(value) if self.kind == "float" else int(value)
        except (TypeError, ValueError) as e:
            msg = f"{self.flag}: cannot use {value!r} ({e})"
            raise ConfigError(msg) from e

    def to_option(self, value: Any) -> Any:
        """A field value in the option's unit (what the CLI shows and the DAG Param defaults to)."""
        if value is None:
            return None
        if self.kind == "list":
            return ",".join(value)
        if self.scale != 1:
            return value / self.scale
        return value

    def check(self, value: Any) -> None:
        """Fail with :class:`ConfigError` when a field value breaks the declared bounds or choices."""
        s = self.spec
        if value is None:
            return
        new = dict(s.renamed).get(value) if isinstance(value, str) else None
        if new is not None:
            msg = f"{self.flag} {value!r} is now called {new!r}"
            raise ConfigError(msg)
        if s.choices and value not in s.choices:
            msg = f"{self.flag} must be one of {', '.join(s.choices)}, got {value!r}"
            raise ConfigError(msg)
        if self.kind in ("str", "list"):
            return
        v = value / self.scale
        for bound, word, ok in (
            (s.minimum, ">=", s.minimum is None or v >= s.minimum),
            (s.maximum, "<=", s.maximum is None or v <= s.maximum),
            (s.exclusive_minimum, ">", s.exclusive_minimum is None or v > s.exclusive_minimum),
            (s.exclusive_maximum, "<", s.exclusive_maximum is None or v < s.exclusive_maximum),
        ):
            if not ok:
                msg = f"{self.flag} must be {word} {bound:g}, got {v:g}"
                raise ConfigError(msg)

    def json_schema(self) -> dict[str, Any]:
        """Keyword arguments of ``airflow.sdk.Param`` (a JSON schema) for this option."""
        s = self.spec
        unit = f" ({s.unit})" if s.unit else ""
        kw: dict[str, Any] = {"description": s.help + unit}
        if s.choices:
            kw["enum"] = [*s.choices, None] if self.optional else list(s.choices)
        else:
            base = {"int": "integer", "float": "number", "str": "string", "list": "string"}[self.kind]
            if self.scale != 1:
                base = "number"
            kw["type"] = [base, "null"] if self.optional else base
        for key, bound in (
            ("minimum", s.minimum),
            ("maximum", s.maximum),
            ("exclusiveMinimum", s.exclusive_minimum),
            ("exclusiveMaximum", s.exclusive_maximum),
        ):
            if bound is not None:
                kw[key] = bound
        return kw


def _kind(hint: Any) -> tuple[str, bool]:
    """("int" | "float" | "str" | "list", optional) of a field's annotation."""
    args = typing.get_args(hint)
    optional = type(None) in args and (typing.get_origin(hint) in (typing.Union, types.UnionType))
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        return "list", optional
    for t, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if hint is t:
            if name == "bool":
                break
            return name, optional
    msg = f"a job parameter must be int, float, str or tuple[str, ...] (optionally None), not {hint}"
    raise ConfigError(msg)


class Job:
    """Base of the job declarations: derives options, validation and the job id from the fields.

    Subclasses are frozen dataclasses with a ``PREFIX`` (the job id's) and may add cross-field
    checks in :meth:`check`.
    """

    PREFIX: ClassVar[str] = "job"

    def __post_init__(self) -> None:
        for o in self.options():
            self_value = getattr(self, o.field)
            o.check(self_value)
        self.check()

    def check(self) -> None:
        """Cross-field validation (raise :class:`ConfigError`); the single fields are checked already."""

    @classmethod
    def options(cls) -> tuple[Option, ...]:
        """The fields users set, in declaration order."""
        return tuple(o for o in _all_options(cls) if o.spec.option is not None)

    @classmethod
    def option(cls, name: str) -> Option:
        """One option by its name (``window_ms``) or its field's (``window_us``)."""
        for o in cls.options():
            if name in (o.name, o.field):
                return o
        msg = f"{cls.__name__} has no option {name!r}"
        raise ConfigError(msg)

    @classmethod
    def from_options(cls, values: Mapping[str, Any], base: Self | None = None) -> Self:
        """The job from option values (CLI namespace or DAG params; missing ones from ``base`` or defaults).

        Keys that are not options of this job are ignored (a namespace carries the stage's too),
        but an option's former name fails, naming the new one.
        """
        said = next((r for key in values if (r := cls.renamed_option(key))), None)
        if said is not None:
            raise ConfigError(said)
        fields: dict[str, Any] = {}
        for o in cls.options():
            if o.name in values:
                fields[o.field] = o.to_field(values[o.name])
            elif base is not None:
                fields[o.field] = getattr(base, o.field)
        return cls(**fields)

    @classmethod
    def renamed_option(cls, name: str) -> str | None:
        """What to say when ``name`` (``window_ms`` or ``--window-ms``) is a former option name; else None."""
        bare = name.removeprefix("--").replace("-", "_")
        for o in cls.options():
            if bare in o.spec.formerly:
                old = "--" + bare.replace("_", "-") if name.startswith("--") else bare
                new = o.flag if name.startswith("--") else o.name
                return f"{old} is now {new}{o.unit_words()}"
        return None

    def option_values(self) -> dict[str, Any]:
        """Option name -> value in the option's unit (the DAG Params' defaults)."""
        return {o.name: o.to_option(getattr(self, o.field)) for o in self.options()}

    def identity(self) -> dict[str, Any]:
        """The fields that identify the job (those declared with ``identifies=True``)."""
        options = _all_options(type(self))
        return {o.spec.key or o.field: getattr(self, o.field) for o in options if o.spec.identifies}

    def job_id(self) -> str:
        """A short stable id: the prefix and a digest of :meth:`identity`."""
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()
        return f"{self.PREFIX}-{digest[:10]}"


_OPTIONS: dict[type, tuple[Option, ...]] = {}  # a job class's options never change: read them once


def _all_options(cls: type) -> tuple[Option, ...]:
    if cls not in _OPTIONS:
        _OPTIONS[cls] = _read_options(cls)
    return _OPTIONS[cls]


def _read_options(cls: type) -> tuple[Option, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_META)
        if spec is None:
            msg = f"{cls.__name__}.{f.name} is not declared with param()"
            raise ConfigError(msg)
        kind, optional = _kind(hints[f.name])
        scale = UNITS.get(spec.unit, 1)
        base = f.name.removesuffix("_us") if spec.unit else f.name
        name = spec.option or base
        name = f"{name}_{spec.unit}" if spec.unit else name
        default = f.default
        opt = Option(f.name, name, kind, optional, scale, None, spec)
        out.append(dataclasses.replace(opt, default=opt.to_option(default)))
    return tuple(out)


def add_options(
    parser: argparse.ArgumentParser, job: type[Job], defaults: Job | None = None, exclude: Sequence[str] = ()
) -> None:
    """Add the job's options (but ``exclude``) to a parser; defaults: ``defaults``' values or the declared."""
    values = defaults.option_values() if defaults is not None else {}
    for o in job.options():
        if o.name in exclude:
            continue
        default = values.get(o.name, o.default)
        shown = "none" if default is None else default
        unit = f" ({o.spec.unit})" if o.spec.unit else ""
        among = f"; one of {', '.join(o.spec.choices)}" if o.spec.choices else ""
        # choices and bounds are checked when the job is built (a ConfigError naming the option),
        # not by argparse: a stage may use an option outside a job (theta-join of files: any column)
        parser.add_argument(
            o.flag,
            dest=o.name,
            type=o.parse,
            default=default,
            help=f"{o.spec.help}{unit}{among} [default: {shown}]",
        )
        for old in o.spec.formerly:  # refused with the new name, not as an unknown option
            flag = "--" + old.replace("_", "-")
            said = job.renamed_option(flag)
            parser.add_argument(
                flag,
                action=_Renamed,
                nargs="?",
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
                metavar=said,
            )


class _Renamed(argparse.Action):
    """A former option name: a usage error that names the option it became (held in ``metavar``)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        parser.error(str(self.metavar))


@dataclasses.dataclass(frozen=True)
class Setting:
    """A stage option that is not part of a job (the source, a validation's verdict, the config file)."""

    name: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    kind: str = "str"

    @property
    def flag(self) -> str:
        """The command-line flag."""
        return "--" + self.name.replace("_", "-")

    def json_schema(self) -> dict[str, Any]:
        """Keyword arguments of ``airflow.sdk.Param``."""
        kw: dict[str, Any] = {"description": self.help}
        if self.choices:
            kw["enum"] = list(self.choices)
        else:
            kw["type"] = {"str": "string", "int": "integer", "bool": "boolean"}[self.kind]
        return kw


SOURCE = Setting("source", "synthetic/hpm_game1-20s-seed7", "the bronze source id")
ON_VIOLATION = Setting(
    "on_violation", "fail", "a missed target fails the run, or is only reported", ("fail", "warn")
)
CONFIG = Setting(
    "config", "", "path of a TOML file overriding the configuration (empty: $OOO_CONFIG, if set)"
)
SAMPLE = Setting("sample", 3, "windows whose result count is checked against DuckDB", kind="int")


def dag_params(
    job: type[Job],
    defaults: Job | None = None,
    settings: Sequence[Setting] = (SOURCE,),
    extra: Sequence[Setting] = (),
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Param name -> (default, JSON-schema keyword arguments): wrap each in ``airflow.sdk.Param``.

    ``settings`` come first (the source), then every option of the job with ``defaults``' values
    (or the declared ones), then ``extra``, then the verdict and the config file, which every DAG
    of a job takes.
    """
    values = (defaults or job()).option_values()
    out: dict[str, tuple[Any, dict[str, Any]]] = {s.name: (s.default, s.json_schema()) for s in settings}
    for o in job.options():
        out[o.name] = (values[o.name], o.json_schema())
    for s in (*extra, ON_VIOLATION, CONFIG):
        out[s.name] = (s.default, s.json_schema())
    return out


def stage_args(job: type[Job], settings: Sequence[Setting] = (SOURCE,)) -> list[str]:
    """The templated arguments that pass a DAG's Params to a stage: ``--window-s {{ params.window_s }}``."""
    out: list[str] = []
    for s in settings:
        out += [s.flag, f"{{{{ params.{s.name} }}}}"]
    for o in job.options():
        value = f"params.{o.name}"
        if o.optional:  # None renders as "None": the parser reads "" as None, say so explicitly
            value = f"'' if {value} is none else {value}"
        out += [o.flag, f"{{{{ {value} }}}}"]
    return out
