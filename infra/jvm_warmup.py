"""A short Delta workload whose JVM dumps the classes it loaded (infra/jvm-archive.sh).

It touches what the stages touch: a Delta write, MERGE, DELETE and reads, window functions,
joins, aggregates, pandas and Arrow conversions, checkpoints. Classes it never loads are simply
loaded the usual way later.
"""

from __future__ import annotations

import tempfile

from delta.tables import DeltaTable
from pyspark import SparkContext
from pyspark.sql import Window
from pyspark.sql import functions as F

from outoforder.config import load_settings
from outoforder.spark.session import get_spark

spark = get_spark(load_settings(), app_name="jvm-warmup")
folder = tempfile.mkdtemp(prefix="ooo-jvm-warmup-")
rows = spark.range(2000).select(
    F.col("id"), (F.col("id") % 7).alias("k"), F.rand(1).alias("v"), F.lit("s").alias("source")
)
rows.write.format("delta").partitionBy("source").save(folder)
target = DeltaTable.forPath(spark, folder)
target.alias("t").merge(rows.alias("n"), "t.id = n.id").whenNotMatchedInsertAll().execute()
table = spark.read.format("delta").load(folder)
table.where("k = 1").groupBy("k").agg(F.sum("v"), F.count("*")).toPandas()
prefix = Window.orderBy("id").rowsBetween(Window.unboundedPreceding, Window.currentRow)
table.withColumn("m", F.max("v").over(prefix)).localCheckpoint().count()
small = spark.createDataFrame(table.limit(100).toPandas())
small.join(table.drop("k"), "id").select(F.explode(F.sequence("k", F.lit(8)))).count()
table.mapInArrow(lambda batches: batches, table.schema).count()
replaced = table.where("k = 3").write.format("delta").mode("overwrite")
replaced.option("replaceWhere", "source = 's' AND k = 3").save(folder)
target.delete("k = 2")
spark.sql(f"DESCRIBE HISTORY delta.`{folder}`").count()

# The JVM writes the archive when it exits: stop it and wait, so the archive is whole when this
# script returns (spark-submit's launcher, a JVM of its own, wrote a small one there earlier).
gateway = SparkContext._gateway
jvm_process = gateway.proc if gateway is not None else None
spark.stop()
if gateway is not None:
    gateway.shutdown()
if jvm_process is not None:
    jvm_process.stdin.close()  # the gateway server exits when its parent's pipe closes
    jvm_process.wait(timeout=120)
