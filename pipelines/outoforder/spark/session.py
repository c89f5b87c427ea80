"""The one place a SparkSession is built: Delta-enabled, local[2] by default, settings from config.

Delta's jars (and s3a's, for a lake on object storage) come from the Maven cache that
infra/setup.sh fills and go on the class path (never ``spark.jars.packages``, which resolves
through Ivy on every start and dies offline). The same settings
(:meth:`outoforder.config.Settings.spark_conf`) go to spark-submit from Airflow.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from outoforder.config import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def get_spark(settings: Settings | None = None, app_name: str = "outoforder") -> SparkSession:
    """Build (or return the running) Delta-enabled SparkSession."""
    from pyspark.sql import SparkSession

    settings = settings or load_settings()
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Not under spark-submit: we choose the master. Under spark-submit (Airflow), the
        # --master of the Spark connection wins, so local and cluster runs use one code path.
        builder = builder.master(settings.spark.master)
    for key, value in settings.spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.spark.log_level)
    return spark
