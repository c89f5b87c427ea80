"""One stream DAG per operator installed beside the built-in ones.

An operator of your own declares its stages in its package (``outoforder.operators`` entry point,
see ``docs/architecture.md``); if it names a stream stage and its check, it gets a DAG here,
``<name>_stream``: one arrival interval per run, then the check, then the run's quality report,
with its job's Params (``[dags.<name>]`` sets their defaults). The built-in operators have DAG
files of their own. Standard library and Airflow only at parse time.
"""

from __future__ import annotations

from _spark_stage import interval_dag  # an Airflow DAG factory (airflow.sdk.dag)

from outoforder.stages import registry

for _op in registry.operators():
    if not _op.builtin and _op.stream is not None:
        globals()[f"{_op.name}_stream"] = interval_dag(_op.name)
