"""The project's one small error hierarchy.

Every error the project raises on purpose is an :class:`OutOfOrderError`, so a caller (a stage, an
Airflow task) can tell our validation failures from bugs. Errors are re-raised with ``from e`` and
never swallowed: a task that fails loudly is retried by Airflow; one that falls back silently is not.
"""

# exit statuses of ``python -m outoforder.stages``: an error (retried by the task), and a failed
# quality check (a verdict on data already written: a retry would only repeat it)
EXIT_ERROR = 2
EXIT_QUALITY = 3
# a scheduled run that found its source without any input yet: nothing to do, and nothing wrong
# either (a stream DAG unpaused before its stream starts); the Airflow task is skipped, saying so
EXIT_NOTHING_YET = 5


class OutOfOrderError(Exception):
    """Base class of all errors raised deliberately by this project."""


class ConfigError(OutOfOrderError, ValueError):
    """A setting or argument is missing, malformed or inconsistent (fix the call, config or environment).

    A :class:`ValueError` too: code that catches bad arguments the standard way catches it.
    """


class SchemaError(OutOfOrderError):
    """A table or file does not have the columns or types the project expects."""


class InputError(OutOfOrderError):
    """Input data cannot be read at all (missing file, unknown format); bad rows are quarantined instead."""


class NothingYet(InputError):
    """A scheduled run's source has no input yet (its stream has not started): skipped, not failed."""


class NothingToJudge(InputError):
    """A check found nothing to judge (no period or window closed): not a pass, and not a verdict either."""


class StateError(OutOfOrderError):
    """Persisted state (operator snapshot, table contents) contradicts what the code expects."""


class QualityError(OutOfOrderError):
    """A data-quality check failed (a Great Expectations suite or a stated quality target)."""


class CheckFailed(QualityError):
    """A check reached its verdict and the data failed it: what it judged stays judged."""


class WriteConflict(StateError):
    """A concurrent commit won and this write must be redone from a fresh read (retried, see io.conflicts)."""
