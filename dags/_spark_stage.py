"""What several DAGs share: the Params that define a job, and the stage options they become.

Not a DAG (Airflow skips files without a DAG). Standard library and Airflow only at parse time.
How a stage is submitted to Spark is the plugin's ``StageOperator`` (plugins/outoforder_airflow).
"""

from __future__ import annotations

from typing import Any


def join_params() -> dict[str, Any]:
    """The Params that define a stream-join job (the same in every join DAG, so the job ids agree)."""
    from airflow.sdk import Param

    return {
        "source": Param("synthetic/hpm_game1-20s-seed7", type="string", description="bronze source id"),
        "r_streams": Param("ball", type="string", description="streams forming R (comma-separated)"),
        "s_streams": Param("team_a,team_b", type="string", description="streams forming S"),
        "window_ms": Param(500.0, type="number", minimum=0, description="w: |r.ts - s.ts| <= w"),
        "theta": Param(2.0, type="number", minimum=0, description="distance threshold (metres)"),
        "predicate": Param("distance", enum=["distance", "key"]),
        "q_user": Param(0.95, type="number", exclusiveMinimum=0, maximum=1, description="recall target"),
        "period_s": Param(5.0, type="number", exclusiveMinimum=0, description="P, the recall period"),
        "interval_s": Param(0.5, type="number", exclusiveMinimum=0, description="L of the estimator"),
        "estimator": Param("learned", enum=["learned", "paper"]),
        "on_violation": Param(
            "fail", enum=["fail", "warn"], description="a missed recall target fails the run"
        ),
        "config": Param("", type="string", description="path of a TOML config override"),
    }


JOIN_ARGS = [
    *("--source", "{{ params.source }}", "--r-streams", "{{ params.r_streams }}"),
    *("--s-streams", "{{ params.s_streams }}", "--window-ms", "{{ params.window_ms }}"),
    *("--theta", "{{ params.theta }}", "--predicate", "{{ params.predicate }}"),
    *("--q-user", "{{ params.q_user }}", "--period-s", "{{ params.period_s }}"),
    *("--interval-s", "{{ params.interval_s }}", "--estimator", "{{ params.estimator }}"),
]


def agg_params() -> dict[str, Any]:
    """The Params that define an aggregate job (shared by aggregate_stream and late_repair)."""
    from airflow.sdk import Param

    return {
        "source": Param("synthetic/hpm_game1-20s-seed7", type="string", description="bronze source id"),
        "streams": Param("", type="string", description="streams to aggregate (comma-separated; empty: all)"),
        "aggregate": Param("sum", type="string", description="sum, count, avg, min, max, median, quantile:q"),
        "window_ms": Param(500.0, type="number", exclusiveMinimum=0, description="window size"),
        "slide_ms": Param(100.0, type="number", exclusiveMinimum=0, description="window slide"),
        "eps": Param(0.05, type="number", exclusiveMinimum=0, exclusiveMaximum=1, description="ε"),
        "delta": Param(0.05, type="number", exclusiveMinimum=0, exclusiveMaximum=1, description="δ"),
        "kp": Param(0.2, type="number", description="PD controller K_p"),
        "kd": Param(4.0, type="number", description="PD controller K_d"),
        "alpha0": Param(0.6, type="number", minimum=0, maximum=1, description="initial α"),
        "alpha_min": Param(0.05, type="number", minimum=0, maximum=1, description="floor of α"),
        "horizon_ms": Param(1000.0, type="number", minimum=0, description="coverage observed after close"),
        "gamma_s": Param(5.0, type="number", minimum=0, description="Γ of the repair rule"),
        "on_violation": Param("fail", enum=["fail", "warn"], description="a missed target fails the run"),
        "config": Param("", type="string", description="path of a TOML config override"),
    }


AGG_ARGS = [
    *("--source", "{{ params.source }}", "--streams", "{{ params.streams }}"),
    *("--aggregate", "{{ params.aggregate }}", "--window-ms", "{{ params.window_ms }}"),
    *("--slide-ms", "{{ params.slide_ms }}", "--eps", "{{ params.eps }}", "--delta", "{{ params.delta }}"),
    *("--kp", "{{ params.kp }}", "--kd", "{{ params.kd }}", "--alpha0", "{{ params.alpha0 }}"),
    *("--alpha-min", "{{ params.alpha_min }}"),
    *("--horizon-ms", "{{ params.horizon_ms }}", "--gamma-s", "{{ params.gamma_s }}"),
]

# Emitted when the late-tuple ledger of an aggregate job meets HPM's Γ rule; late_repair runs on it.
LEDGER_DUE_URI = "outoforder://silver/agg_ledger/repair-due"


def theta_params() -> dict[str, Any]:
    """The Params of a θ-join backfill job (the streams, column, predicates and window identify it)."""
    from airflow.sdk import Param

    return {
        "source": Param("synthetic/hpm_game1-20s-seed7", type="string", description="bronze source id"),
        "streams": Param("ball,team_a", type="string", description="streams S0,S1,… in chain order"),
        "column": Param("x", enum=["value", "x", "y", "z", "event_ts"], description="join column"),
        "predicates": Param(
            "band:0.01", type="string", description="θ0,θ1,… between neighbours: <, <=, >=, >, = or band:c"
        ),
        "window_s": Param(10.0, type="number", exclusiveMinimum=0, description="tumbling event-time window"),
        "method": Param("fast", enum=["fast", "cfs", "one-bucket", "spark-sql", "cross"]),
        "partitions": Param(16, type="integer", minimum=1, maximum=256, description="range partitions"),
        "prefilter": Param(
            "none", enum=["none", "mcf", "semi"], description="equi-joins: MCF or semi-join pre-filter"
        ),
        "sample": Param(2, type="integer", minimum=0, description="windows checked against DuckDB"),
        "on_violation": Param("fail", enum=["fail", "warn"], description="a failed check fails the run"),
        "config": Param("", type="string", description="path of a TOML config override"),
    }


THETA_ARGS = [
    *("--source", "{{ params.source }}", "--streams", "{{ params.streams }}"),
    *("--column", "{{ params.column }}", "--predicates", "{{ params.predicates }}"),
    *("--window-s", "{{ params.window_s }}", "--method", "{{ params.method }}"),
    *("--partitions", "{{ params.partitions }}", "--prefilter", "{{ params.prefilter }}"),
]


def topk_params() -> dict[str, Any]:
    """The Params of a continuous top-k job; the defaults fit the demo's 20 s replay.

    The seed's query is 60 s windows sliding by 5 s with n = 30 queries per decision: on a 20 s
    replay that would close no window, so the defaults scale the windows down (the CLI keeps the
    seed's).
    """
    from airflow.sdk import Param

    return {
        "source": Param("synthetic/hpm_game1-20s-seed7", type="string", description="bronze source id"),
        "streams": Param("team_a,team_b", type="string", description="streams to rank (empty: all)"),
        "score": Param("value", enum=["value", "x", "y", "z"], description="the score column"),
        "k": Param(5, type="integer", minimum=1, description="results per window"),
        "window_s": Param(4.0, type="number", exclusiveMinimum=0, description="window size"),
        "slide_s": Param(0.5, type="number", exclusiveMinimum=0, description="window slide"),
        "eps_min": Param(0.95, type="number", exclusiveMinimum=0, maximum=1, description="ε_min"),
        "cache_s": Param(2.0, type="number", exclusiveMinimum=0, description="initial cache duration K"),
        "m": Param(10, type="integer", minimum=1, description="candidate durations"),
        "n": Param(10, type="integer", minimum=1, description="queries per decision"),
        "horizon_s": Param(2.0, type="number", minimum=0, description="late tuples awaited for scoring"),
        "on_violation": Param("fail", enum=["fail", "warn"], description="a missed target fails the run"),
        "config": Param("", type="string", description="path of a TOML config override"),
    }


TOPK_ARGS = [
    *("--source", "{{ params.source }}", "--streams", "{{ params.streams }}"),
    *("--score", "{{ params.score }}", "--k", "{{ params.k }}"),
    *("--window-s", "{{ params.window_s }}", "--slide-s", "{{ params.slide_s }}"),
    *("--eps-min", "{{ params.eps_min }}", "--cache-s", "{{ params.cache_s }}"),
    *("--m", "{{ params.m }}", "--n", "{{ params.n }}", "--horizon-s", "{{ params.horizon_s }}"),
]
