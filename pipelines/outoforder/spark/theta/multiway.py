"""A multi-way θ-join ``F0.c0 θ0 F1.c1 θ1 F2.c2 …`` as the seed's pairwise tree of θ-joins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from outoforder.core.theta.plan import (
    ROWS_PER_PARTITION,
    JoinStats,
    Theta,
)
from outoforder.errors import ConfigError
from outoforder.spark.session import side_by_side
from outoforder.spark.theta.join import theta_join
from outoforder.spark.theta.result import ThetaResult


@dataclass
class MultiwayResult:
    """The final rows (lazy), every pairwise join by round, the cached intermediates."""

    rows: DataFrame
    joins: list[list[ThetaResult]]
    cached: list[DataFrame] = field(default_factory=list)

    @property
    def rounds(self) -> list[list[JoinStats]]:
        """The counters of every pairwise join by round, as of the actions run so far."""
        return [[res.refresh() for res in rnd] for rnd in self.joins]

    def release(self) -> None:
        """Unpersist the intermediate results (after the final rows have been used)."""
        for df in self.cached:
            df.unpersist()
        self.cached.clear()


_Group = tuple[int, int, DataFrame]  # first and last frame index in the group, its rows


def multiway_join(
    frames: Sequence[DataFrame],
    cols: Sequence[str],
    thetas: Sequence[Theta],
    method: str = "fast",
    partitions: int = 8,
    rows_per_partition: int = ROWS_PER_PARTITION,
) -> MultiwayResult:
    """``F0.c0 θ0 F1.c1 θ1 F2.c2 …`` as the seed's pairwise tree.

    Round by round, neighbouring groups are joined two by two on the predicate that links them,
    the pairs of a round concurrently (one driver thread each); every intermediate result is
    materialized (cached), because the next round's plan needs its min and max. An odd group out
    waits for the next round. The last join stays lazy.
    """
    if len(frames) < 2 or len(cols) != len(frames) or len(thetas) != len(frames) - 1:
        msg = (
            "a multi-way θ-join needs n >= 2 frames, n columns and n - 1 predicates; "
            f"got {len(frames)}, {len(cols)}, {len(thetas)}"
        )
        raise ConfigError(msg)
    groups: list[_Group] = [(i, i, f) for i, f in enumerate(frames)]
    result = MultiwayResult(frames[0], [])

    def join_pair(left: _Group, right: _Group, materialize: bool) -> tuple[_Group, ThetaResult]:
        res = theta_join(
            left[2],
            right[2],
            (cols[left[1]], cols[right[0]]),
            thetas[left[1]],
            method,
            partitions,
            rows_per_partition,
        )
        rows = res.rows
        result.cached.extend(res.cached)
        if materialize:
            rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
            result.cached.append(rows)
            n = rows.count()
            res.refresh()
            res.stats.output_rows = n
        return (left[0], right[1], rows), res

    try:
        while len(groups) > 1:
            materialize = len(groups) > 2
            pairs = [(groups[k], groups[k + 1], materialize) for k in range(0, len(groups) - 1, 2)]
            done = side_by_side(frames[0].sparkSession, lambda p: join_pair(*p), pairs, len(pairs))
            result.joins.append([res for _, res in done])
            groups = [g for g, _ in done] + ([groups[-1]] if len(groups) % 2 else [])
    except BaseException:
        result.release()
        raise
    result.rows = groups[0][2]
    return result
