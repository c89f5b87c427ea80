"""Every Great Expectations suite of the project, in one place, grouped into checkpoints.

A suite is a named list of expectations over one frame that a stage prepares (the stage computes
*what* is judged, e.g. the recall of every closed period; the suite says *what must hold*). A
checkpoint is the set of suites one validation task runs together. The targets come in as
parameters (the job's Q_user, ε, ε_min…), never as constants here.

>>> [s.name for s in CHECKPOINTS["join"]]
['join_results', 'join_recall', 'join_feasibility']
>>> [type(e).__name__ for e in expectations("join_recall", q_user=0.9, periods_met=0.95)]
['ExpectColumnValuesToBeBetween']
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from outoforder.errors import ConfigError


@dataclass(frozen=True)
class Suite:
    """One suite: its checkpoint, what it means in plain words, and how to build its expectations.

    ``explains`` marks a *feasibility* suite: whether the target was reachable under the user's
    bound. Its failure is not the pipeline's fault but the configuration's, so it and the suites
    it explains (the target's own verdicts in the same run) are warnings, not failures.
    """

    name: str
    checkpoint: str
    meaning: str
    build: Callable[[Mapping[str, Any]], list[Any]]
    explains: tuple[str, ...] | None = None


def out_of_reach(failed: Iterable[str]) -> set[str]:
    """Of the suites that failed in one run, those that are warnings: the target was out of reach.

    >>> sorted(out_of_reach(["topk_feasibility", "topk_accuracy", "topk_completeness"]))
    ['topk_accuracy', 'topk_feasibility']
    >>> out_of_reach(["topk_accuracy"])
    set()
    """
    failed = set(failed)
    warned: set[str] = set()
    for name in failed:
        suite = SUITES.get(name)
        if suite is not None and suite.explains is not None:
            warned |= {name, *(s for s in suite.explains if s in failed)}
    return warned


def _gxe() -> Any:
    # imported when a suite is built: GX takes seconds to import and DAG files never need it
    import great_expectations.expectations as gxe

    return gxe


def _not_null(*cols: str) -> list[Any]:
    return [_gxe().ExpectColumnValuesToNotBeNull(column=c) for c in cols]


def _in_set(column: str, values: list[Any], **kw: Any) -> Any:
    return _gxe().ExpectColumnValuesToBeInSet(column=column, value_set=values, **kw)


def _equal(a: str, b: str, **kw: Any) -> Any:
    return _gxe().ExpectColumnPairValuesToBeEqual(column_A=a, column_B=b, **kw)


def _bronze_arrivals(p: Mapping[str, Any]) -> list[Any]:
    g = _gxe()
    return [
        g.ExpectTableColumnsToMatchSet(column_set=list(p["columns"]), exact_match=True),
        *_not_null("source", "stream", "key", "event_ts", "arrival_seq", "row_hash", "ingest_id"),
        g.ExpectColumnValuesToBeUnique(column="arrival_seq"),
        g.ExpectCompoundColumnsToBeUnique(column_list=["source", "row_hash"]),
        g.ExpectColumnValuesToBeBetween(column="event_ts", min_value=p["event_lo"], max_value=p["event_hi"]),
        _in_set("stream", list(p["streams"])),
    ]


def _bronze_accounting(_: Mapping[str, Any]) -> list[Any]:
    return [
        # every physical line is a header, a blank, an accepted or a quarantined row
        _equal("lines", "lines_accounted"),
        _equal("rows_accepted", "bronze_rows"),
        _equal("rows_quarantined", "quarantine_rows"),
        _gxe().ExpectColumnValuesToBeUnique(column="ingest_id"),
    ]


def _join_results(_: Mapping[str, Any]) -> list[Any]:
    return [_equal("stored_rows", "distinct_pairs")]


def _join_recall(p: Mapping[str, Any]) -> list[Any]:
    return [
        _gxe().ExpectColumnValuesToBeBetween(
            column="recall", min_value=p["q_user"], max_value=1.0, mostly=float(p["periods_met"])
        )
    ]


def _join_feasibility(p: Mapping[str, Any]) -> list[Any]:
    return [_gxe().ExpectColumnValuesToBeBetween(column="reachable", min_value=p["q_user"], max_value=1.0)]


def _agg_results(_: Mapping[str, Any]) -> list[Any]:
    return [
        _gxe().ExpectColumnValuesToBeUnique(column="window_id"),
        *_not_null("window_id", "value", "version", "produced_by"),
    ]


def _agg_error(p: Mapping[str, Any]) -> list[Any]:
    # (ε, δ): at most a share δ of the windows may miss ε at emission
    return [_in_set("met_at_emission", [True], mostly=1.0 - float(p["delta"]))]


def _agg_feasibility(p: Mapping[str, Any]) -> list[Any]:
    return [_in_set("within_bound", [True], mostly=1.0 - float(p["delta"]))]


def _agg_quality(_: Mapping[str, Any]) -> list[Any]:
    return [
        _in_set("exact_if_settled", [True]),
        # no gaps: a window missing from the results must be waiting for a repair
        _in_set("present_if_settled", [True]),
    ]


def _topk_completeness(_: Mapping[str, Any]) -> list[Any]:
    return [
        _in_set("accounted", [True]),
        _gxe().ExpectColumnValuesToBeBetween(column="emissions", min_value=0, max_value=1),
    ]


def _topk_accuracy(p: Mapping[str, Any]) -> list[Any]:
    return [_gxe().ExpectColumnMeanToBeBetween(column="hit_rate", min_value=p["eps_min"], max_value=1.0)]


def _topk_feasibility(p: Mapping[str, Any]) -> list[Any]:
    return [_gxe().ExpectColumnMeanToBeBetween(column="reachable", min_value=p["eps_min"], max_value=1.0)]


def _theta_completeness(_: Mapping[str, Any]) -> list[Any]:
    return [
        _in_set("ran", [True]),
        _equal("stored", "reported"),
        # only the sampled windows have a DuckDB count
        _equal("stored", "independent", ignore_row_if="either_value_is_missing"),
    ]


def _theta_results(_: Mapping[str, Any]) -> list[Any]:
    return [_gxe().ExpectColumnValuesToBeUnique(column="result_key")]


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "bronze_arrivals",
            "bronze",
            "Stored arrivals have the bronze schema, no missing fields, one row per arrival sequence "
            "and per raw line, plausible event times and known stream names.",
            _bronze_arrivals,
        ),
        Suite(
            "bronze_accounting",
            "bronze",
            "Every line of every ingested file is accounted for: header, blank, accepted (found in "
            "bronze) or quarantined (found in the quarantine); each file ingested once.",
            _bronze_accounting,
        ),
        Suite(
            "join_results",
            "join",
            "The stream join never stored the same pair twice: in every period (of a pair's later "
            "event time) its stored rows equal its distinct pairs. (That every pair records the "
            "retentions in force when it was produced is the table's NOT NULL schema, which Delta "
            "enforces on write.)",
            _join_results,
        ),
        Suite(
            "join_recall",
            "join",
            "In at least the share quality.periods_met of the closed periods judged (a run's and the "
            "job's latest before them, at least 1 / (1 − share)), the stream join found at least the "
            "share Q_user of the pairs the exact join finds (recall ≥ Q_user).",
            _join_recall,
        ),
        Suite(
            "join_feasibility",
            "join",
            "Under the job's retention bound, the adaptations of every closed period stated that the "
            "bound allows recall ≥ Q_user. A period where it did not is out of reach: it is judged "
            "here (a warning naming the retention needed), not by join_recall (a failure).",
            _join_feasibility,
            explains=(),  # join_recall judges only the periods the bound allowed
        ),
        Suite(
            "agg_results",
            "aggregate",
            "Each window's aggregate is stored once, with its value, version and producer.",
            _agg_results,
        ),
        Suite(
            "agg_error",
            "aggregate",
            "At emission, at least a share 1 − δ of the windows were within relative error ε of the "
            "exact value.",
            _agg_error,
        ),
        Suite(
            "agg_feasibility",
            "aggregate",
            "Under the job's latency bound, at least a share 1 − δ of the windows needed no longer "
            "a wait than the bound to be within ε (the K each needed, from when its tuples arrived). "
            "When it fails (ε, δ) was out of reach: the error verdict is then a warning naming the "
            "bound it needed, not a failure of the controller.",
            _agg_feasibility,
            explains=("agg_error",),
        ),
        Suite(
            "agg_quality",
            "aggregate",
            "Windows with no late tuple pending are exact; no window is missing.",
            _agg_quality,
        ),
        Suite(
            "topk_completeness",
            "topk",
            "Every sliding window was emitted exactly once (or all its tuples arrived late).",
            _topk_completeness,
        ),
        Suite(
            "topk_accuracy",
            "topk",
            "Over the closed windows, the emitted top-k lists contain on average at least the share "
            "ε_min of the exact top-k.",
            _topk_accuracy,
        ),
        Suite(
            "topk_feasibility",
            "topk",
            "Under the job's latency bound, a cache waiting the whole bound would have reached ε_min "
            "on the settled windows (from when their true top-k arrived). When it fails the target "
            "was out of reach: the accuracy verdict is then a warning naming the bound it needed, "
            "not a failure of the controller.",
            _topk_feasibility,
            explains=("topk_accuracy",),
        ),
        Suite(
            "theta_completeness",
            "theta",
            "Every window of the backfill ran; the rows stored equal the rows the run reported and, "
            "for sampled windows, DuckDB's independent count.",
            _theta_completeness,
        ),
        Suite(
            "theta_results",
            "theta",
            "No θ-join result row is stored twice.",
            _theta_results,
        ),
    )
}

CHECKPOINTS: dict[str, list[Suite]] = {}
for _suite in SUITES.values():
    CHECKPOINTS.setdefault(_suite.checkpoint, []).append(_suite)


def expectations(name: str, **params: Any) -> list[Any]:
    """The expectations of suite ``name`` with the job's targets filled in."""
    try:
        suite = SUITES[name]
    except KeyError:
        msg = f"unknown quality suite {name!r} (known: {', '.join(SUITES)})"
        raise ConfigError(msg) from None
    try:
        return suite.build(params)
    except KeyError as e:
        msg = f"suite {name!r} needs the parameter {e.args[0]!r}"
        raise ConfigError(msg) from e
