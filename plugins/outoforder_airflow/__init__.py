"""The project's Airflow extensions: the stage operator, its extra links and the reports web app.

Importable by DAG files because Airflow puts the plugins folder on ``sys.path``; registered with
Airflow by ``plugins/outoforder_plugin.py``. Nothing here imports Spark.
"""
