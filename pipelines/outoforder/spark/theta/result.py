"""What every θ-join method returns: the joined rows, lazily, and the run's counters."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from outoforder.core.theta.plan import (
    JoinStats,
    Theta,
)

TALLY = "_tally"  # the column of a pair task's tally row (null on the result rows)


TALLY_FIELDS = ("tested", "routed", "output", "nulls")


class Tally:
    """Counters of the pair tasks, which add one tally row each to their output.

    A tally row holds the task's rows compared, rows routed to it, rows output and null/NaN rows
    dropped; the result rows leave it out. Spark observes their sums
    (:class:`pyspark.sql.Observation`) in the first action that computes the rows, whatever
    DataFrame derived from them it runs on.
    """

    def __init__(self, null_rows: int = 0, complete_output: bool = True) -> None:
        from pyspark.sql import Observation

        self.observed = Observation(f"theta_tally_{uuid.uuid4().hex}")
        self.null_rows = null_rows  # those the statistics counted before
        # whether every output row passes through the pair tasks (full pairs joined in the JVM do not)
        self.complete_output = complete_output
        # where no pair task runs (inequalities): (rows compared, rows routed), by a job of its own
        # when the counters are first read
        self.counted: Callable[[], tuple[int, int]] | None = None
        self._counts: tuple[int, int] | None = None
        self._observing = False

    def observe(self, out: DataFrame) -> DataFrame:
        """The pair tasks' output without its tally rows, their sums observed."""
        self._observing = True
        sums = [F.coalesce(F.sum(f"{TALLY}.{k}"), F.lit(0)).alias(k) for k in TALLY_FIELDS]
        return out.observe(self.observed, *sums).where(F.col(TALLY).isNull()).drop(TALLY)

    def sums(self) -> dict[str, int]:
        """The observed sums (zeros before the first action, or where no pair task ran)."""
        got = self.observed.get if self._observing else {}
        return {k: int(got.get(k) or 0) for k in TALLY_FIELDS}

    def compared_and_routed(self) -> tuple[int, int]:
        """Rows compared and rows routed to partial pairs (as of the first action, or counted once)."""
        if self.counted is None:
            got = self.sums()
            return got["tested"], got["routed"]
        if self._counts is None:
            self._counts = self.counted()
        return self._counts


@dataclass
class ThetaResult:
    """The joined rows (lazy) and the run's counters; :meth:`release` frees cached inputs.

    FastThetaJoin's per-row counters (rows compared, rows routed to partial pairs, output) are
    known once the rows have been computed: :meth:`count` fills them in, :meth:`refresh` after
    any other action (the output only where no full pair was joined in the JVM: then count()).
    """

    rows: DataFrame
    stats: JoinStats
    method: str
    cached: list[DataFrame] = field(default_factory=list)
    tally: Tally | None = None

    def count(self) -> int:
        """Run the join and count its rows (sets ``stats.output_rows`` and the counters)."""
        n = self.rows.count()
        self.refresh()
        self.stats.output_rows = n  # the count itself: the counters add up every action so far
        return n

    def refresh(self) -> JoinStats:
        """The counters as the executors left them after the actions run so far."""
        if self.tally is not None:
            self.stats.rows_compared, self.stats.replicated_rows = self.tally.compared_and_routed()
            got = self.tally.sums()
            if self.tally.complete_output:  # else count() sets it
                self.stats.output_rows = got["output"]
            self.stats.null_rows = self.tally.null_rows + got["nulls"]
        return self.stats

    def release(self) -> None:
        """Unpersist what the method cached (the CFS sort, multi-way intermediate results)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


def theta_column(theta: Theta, a: Column, b: Column) -> Column:
    """``a θ b`` as a Spark column (the same operators as :meth:`Theta.holds`)."""
    if theta.op == "<":
        return a < b
    if theta.op == "<=":
        return a <= b
    if theta.op == ">=":
        return a >= b
    if theta.op == ">":
        return a > b
    if theta.op == "=":
        return a == b
    return F.abs(a - b) <= F.lit(theta.band)


def valid_values(col: str) -> Column:
    """Rows whose join value can match (not null, not NaN)."""
    c = F.col(col)
    return c.isNotNull() & ~F.isnan(c)


def condition(r: DataFrame, s: DataFrame, on: tuple[str, str], theta: Theta) -> Column:
    """``r[on[0]] θ s[on[1]]`` as a join condition, both sides as doubles."""
    return theta_column(theta, r[on[0]].cast("double"), s[on[1]].cast("double"))


def empty_result(r: DataFrame, s: DataFrame, stats: JoinStats, method: str) -> ThetaResult:
    """No rows, with the counters so far (a side with no usable row)."""
    return ThetaResult(r.crossJoin(s).limit(0), stats, method)
