#!/usr/bin/env bash
# Print JVM options that load Spark's classes from a class-data-sharing archive, building it first.
#
#   bash infra/jvm-archive.sh "<base JVM options>"   ->  "<base options> -XX:SharedArchiveFile=…"
#
# A Spark driver loads and verifies some 15,000 classes at every start (Spark, Delta, Hadoop,
# Jackson); the tests and the main job start one JVM per stage, so that start-up is a large part
# of their CPU. A dynamic CDS archive (JDK 13+) holds those classes already parsed and verified:
# measured here, a replay stage started with it used 21.8 CPU-seconds instead of 31.0.
#
# The archive is made once per machine by a short Delta workload run with
# -XX:ArchiveClassesAtExit (infra/jvm_warmup.py), cached under $OOO_HOME/jvm, keyed by the JDK, the
# Spark venv, the Delta jars, the base options and the workload. A JVM whose class path does not
# start with the archive's (the cluster's master and workers, spark-submit's launcher) ignores the
# archive and starts as usual; the unified-logging tags that would say so are turned off. Nothing a
# JVM computes depends on it. If the archive cannot be made, the base options are printed unchanged.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
base="${1:-}"
quiet="-Xlog:cds=off -Xlog:cds+dynamic=off"
key="$( { java -version 2>&1; echo "$OOO_SPARK_VENV $OOO_SPARK_JARS_DIR $base"; ls "$OOO_SPARK_JARS_DIR";
  cat "$here/jvm_warmup.py"; } | sha256sum | cut -c1-12)"
archive="$OOO_HOME/jvm/spark-$key.jsa"
if [ ! -s "$archive" ]; then
  mkdir -p "$OOO_HOME/jvm"
  tmp="$archive.tmp.$$"
  echo "[jvm-archive] building Spark's class-data-sharing archive (once per machine, ~30 s)" >&2
  if JAVA_TOOL_OPTIONS="$base -XX:ArchiveClassesAtExit=$tmp $quiet" \
      "$OOO_SPARK_VENV/bin/python" "$here/jvm_warmup.py" >"$OOO_HOME/jvm/warmup.log" 2>&1 \
      && [ "$(stat -c %s "$tmp" 2>/dev/null || echo 0)" -gt 20000000 ]; then
    mv -f "$tmp" "$archive"
    find "$OOO_HOME/jvm" -name 'spark-*.jsa' ! -name "spark-$key.jsa" -delete
  else
    rm -f "$tmp"
    echo "[jvm-archive] could not build it (see $OOO_HOME/jvm/warmup.log); JVMs start without it" >&2
    echo "$base"
    exit 0
  fi
fi
echo "$base -XX:SharedArchiveFile=$archive $quiet"
