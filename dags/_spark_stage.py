"""What every DAG of the project shares: how a pipeline stage is submitted to Spark.

Not a DAG (Airflow skips files without a DAG). Standard library and Airflow only at parse time.
"""

from __future__ import annotations

from typing import Any

from outoforder.config import REPO_ROOT, load_settings

APP = str(REPO_ROOT / "pipelines" / "outoforder" / "stages" / "spark_entry.py")


def delta_jars() -> str:
    """Delta's jars, resolved when a task runs (a missing jar cache fails the task, not the parse)."""
    return ",".join(load_settings().spark.jar_paths())


def submit_kwargs() -> dict[str, Any]:
    """SparkSubmitOperator arguments of every stage (the DAG registers ``delta_jars`` as a macro)."""
    return {
        "application": APP,
        "conn_id": "spark_default",  # master local[2] by default (README)
        "conf": load_settings().spark.to_conf(with_jars=False),
        "jars": "{{ delta_jars() }}",
        "env_vars": {"OOO_CONFIG": "{{ params.config }}"},
        "verbose": False,
    }


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
