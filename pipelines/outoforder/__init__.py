"""outoforder: quality-driven processing of out-of-order streams on Spark, Delta Lake and Airflow.

Layers (imports flow one way, enforced by import-linter contracts in pyproject.toml):

- ``core``: pure Python + numpy algorithms (time, disorder statistics, delay models, operators);
- ``sources``: dataset readers, the disorder injector and generators (no Spark);
- ``io``: Delta tables (schemas, paths, idempotent writes, interval reads);
- ``spark``: the SparkSession factory and set-at-a-time operators;
- ``quality``: Great Expectations suites and metrics;
- ``stages``: one module per pipeline stage and the ``python -m outoforder.stages`` CLI.
"""

__version__ = "0.1.0"
