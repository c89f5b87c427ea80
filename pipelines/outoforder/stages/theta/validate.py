"""``validate-theta``: Great Expectations completeness of a θ-join backfill interval.

Every window of the interval ran and its stored rows equal the count its run reported; no result
row repeats; for sampled windows, evenly spread, the stored rows also equal DuckDB's count of the
same θ-join over the same bronze rows (an independent engine as the oracle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from outoforder.core.theta.plan import Theta
from outoforder.errors import QualityError
from outoforder.io.conflicts import retry_on_conflict
from outoforder.stages.context import StageContext
from outoforder.stages.theta.backfill import window_frames
from outoforder.stages.theta.spec import ThetaJob

if TYPE_CHECKING:
    pass


def duckdb_count(frames: list[Any], job: ThetaJob) -> int:
    """The independent count: the same chained θ-join in DuckDB over pandas frames ``s{i}_v``."""
    import duckdb

    con = duckdb.connect()
    names = [f"t{i}" for i in range(len(frames))]
    for name, df in zip(names, frames, strict=True):
        con.register(name, df)
    conds = []
    for i, theta in enumerate(job.thetas()):
        a, b = f"t{i}.s{i}_v", f"t{i + 1}.s{i + 1}_v"
        conds.append(_sql(theta, a, b))
    valid = [f"not isnan({n}.s{i}_v)" for i, n in enumerate(names)]  # NaN never matches (as in Spark)
    q = f"select count(*) from {', '.join(names)} where {' and '.join(conds + valid)}"
    return int(con.execute(q).fetchone()[0])  # type: ignore[index]


def _sql(theta: Theta, a: str, b: str) -> str:
    if theta.op == "band":
        return f"abs({a} - {b}) <= {theta.band!r}"
    return f"{a} {'=' if theta.op == '=' else theta.op} {b}"


@retry_on_conflict
def validate_theta(
    ctx: StageContext,
    start_us: int,
    end_us: int,
    sample: int = 3,
    fail: bool | None = None,
    run_name: str | None = None,
) -> list[Any]:
    """GX completeness of ``[start, end)``: every window was run, no result row repeats.

    Every window's stored rows equal the count its run reported; for ``sample`` windows, evenly
    spread, they also equal DuckDB's count of the same θ-join over the same bronze rows. ``fail``
    None follows ``quality.on_violation``.
    """
    spark, settings, source, job = ctx.spark, ctx.settings, ctx.bronze_source, ctx.job_of(ThetaJob)
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, THETA_RESULTS, THETA_WINDOWS
    from outoforder.quality.checkpoints import conclude, run_checkpoint

    starts = job.windows(start_us, end_us)
    jid = job.job_id()
    if not delta.exists(spark, THETA_WINDOWS, settings.lake_root):
        msg = f"no θ-join backfill has run yet (no {THETA_WINDOWS.name} under {settings.lake_root})"
        raise QualityError(msg)
    in_range = (F.col("window_start_us") >= start_us) & (F.col("window_start_us") < end_us)
    mine = (F.col("source") == source) & (F.col("job") == jid) & in_range
    ran = {r[0]: r[1] for r in delta.read(spark, THETA_WINDOWS, settings.lake_root).where(mine)
           .select("window_start_us", "output_rows").collect()}  # fmt: skip
    results = delta.read(spark, THETA_RESULTS, settings.lake_root).where(mine)
    stored = {r[0]: r[1] for r in results.groupBy("window_start_us").count().collect()}
    picks = sorted(
        {starts[round(i * (len(starts) - 1) / max(sample - 1, 1))] for i in range(min(sample, len(starts)))}
    )
    bronze = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == source)
    independent = {
        w0: duckdb_count([f.toPandas() for f in window_frames(bronze, job, w0)], job) for w0 in picks
    }
    judged = spark.createDataFrame(
        [(w0, w0 in ran, int(stored.get(w0, 0)), int(ran.get(w0, -1)), independent.get(w0)) for w0 in starts],
        "window_start_us long, ran boolean, stored long, reported long, independent long",
    )
    keyed = results.select(F.concat_ws(",", "window_start_us", F.concat_ws(",", "seqs")).alias("result_key"))
    suites = run_checkpoint(
        settings, "theta", {"theta_completeness": judged, "theta_results": keyed},
        source=source, job=jid, run_name=run_name,
    )  # fmt: skip
    conclude(
        suites,
        f"θ-join {jid} of {source}: {len(starts)} windows, {len(picks)} checked against DuckDB",
        settings.quality.fails(fail),
    )
    return suites
