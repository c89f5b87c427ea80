#!/usr/bin/env bash
# A Spark standalone cluster on loopback: one master and N workers, started with the daemon script
# of the pyspark distribution in the Spark venv (pyspark/sbin/spark-daemon.sh), in the background.
#
#   bash infra/spark-cluster.sh start [--workers N] [--cores C] [--memory M]
#                                     set up (idempotent), start, wait until every worker has
#                                     registered, print the master URL
#   bash infra/spark-cluster.sh stop  stop the workers and the master
#   bash infra/spark-cluster.sh status
#   bash infra/spark-cluster.sh env   the OOO_SPARK_MASTER that points the pipeline at it
#                                     (eval "$(bash infra/spark-cluster.sh env)")
#
# Defaults (override in the environment): OOO_SPARK_MASTER_PORT=7077, OOO_SPARK_MASTER_UI_PORT=8081
# (workers' UIs from OOO_SPARK_WORKER_UI_PORT=8082 up; 0 = any free port), 1 worker with 2 cores and 4g, logs and work folders under
# OOO_SPARK_CLUSTER_DIR=.local/spark-cluster. The pipeline uses the cluster when spark.master (or
# OOO_SPARK_MASTER, or the Airflow connection spark_default that infra/airflow.sh derives from it)
# is its URL; the workers read the jar cache from the same paths as the driver (same machine).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

cmd="${1:-start}"; shift || true
workers=1; cores=2; memory=4g
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --cores) cores="$2"; shift 2 ;;
    --memory) memory="$2"; shift 2 ;;
    *) echo "usage: bash infra/spark-cluster.sh start|stop|status|env [--workers N] [--cores C] [--memory M]" >&2; exit 64 ;;
  esac
done

port="${OOO_SPARK_MASTER_PORT:-7077}"
ui_port="${OOO_SPARK_MASTER_UI_PORT:-8081}"
master="spark://127.0.0.1:$port"
dir="${OOO_SPARK_CLUSTER_DIR:-$OOO_LOCAL/spark-cluster}"
say() { echo "[spark-cluster] $*"; }

spark_home() { "$OOO_SPARK_VENV/bin/python" -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))'; }
daemon() {  # start|stop class instance args...
  SPARK_HOME="$SPARK_HOME" SPARK_LOG_DIR="$dir/logs" SPARK_PID_DIR="$dir/pids" SPARK_IDENT_STRING=ooo \
    SPARK_WORKER_DIR="$dir/work" SPARK_LOCAL_IP=127.0.0.1 \
    "$SPARK_HOME/sbin/spark-daemon.sh" "$@"
}
# the master's JSON view: how many workers are ALIVE
alive() { curl -fsS "http://127.0.0.1:$ui_port/json/" 2>/dev/null \
            | python3 -c 'import json,sys; print(sum(w["state"]=="ALIVE" for w in json.load(sys.stdin)["workers"]))' 2>/dev/null \
            || echo 0; }
running() { ls "$dir/pids"/*Master*.pid >/dev/null 2>&1 && kill -0 "$(cat "$dir"/pids/*Master*.pid)" 2>/dev/null; }

case "$cmd" in
  start)
    bash "$here/setup.sh" >/dev/null
    SPARK_HOME="$(spark_home)"
    mkdir -p "$dir/logs" "$dir/pids" "$dir/work"
    if running; then
      say "already running: $master ($(alive) workers alive; UI http://127.0.0.1:$ui_port)"
      exit 0
    fi
    say "starting the master at $master (UI http://127.0.0.1:$ui_port, logs in $dir/logs)"
    daemon start org.apache.spark.deploy.master.Master 1 \
      --host 127.0.0.1 --port "$port" --webui-port "$ui_port" >/dev/null
    for i in $(seq 1 "$workers"); do
      worker_ui=0  # 0: any free port
      [ "${OOO_SPARK_WORKER_UI_PORT:-8082}" != 0 ] && worker_ui=$(( ${OOO_SPARK_WORKER_UI_PORT:-8082} + i - 1 ))
      daemon start org.apache.spark.deploy.worker.Worker "$i" \
        --host 127.0.0.1 --webui-port "$worker_ui" --cores "$cores" --memory "$memory" \
        --work-dir "$dir/work" "$master" >/dev/null
    done
    for _ in $(seq 1 60); do
      [ "$(alive)" -ge "$workers" ] && break
      sleep 1
    done
    if [ "$(alive)" -lt "$workers" ]; then
      say "only $(alive) of $workers workers registered after 60 s; see $dir/logs" >&2
      tail -20 "$dir"/logs/*.out >&2 || true
      exit 1
    fi
    say "ready: $master with $workers worker(s) x $cores cores, $memory"
    ;;
  stop)
    SPARK_HOME="$(spark_home)"
    stopped=0
    for pid in "$dir"/pids/*Worker*.pid; do
      [ -f "$pid" ] || continue
      n="$(basename "$pid" .pid | sed -E 's/.*-([0-9]+)$/\1/')"
      daemon stop org.apache.spark.deploy.worker.Worker "$n" >/dev/null || true
      stopped=1
    done
    if running; then daemon stop org.apache.spark.deploy.master.Master 1 >/dev/null || true; stopped=1; fi
    # finished applications' folders (jars are on the class path, so these stay small)
    rm -rf "$dir/work"/app-* 2>/dev/null || true
    say "$([ $stopped -eq 1 ] && echo stopped || echo 'not running')"
    ;;
  status)
    if running; then say "running: $master, $(alive) workers alive (UI http://127.0.0.1:$ui_port)"; else say "not running"; exit 3; fi
    ;;
  env)
    echo "export OOO_SPARK_MASTER='$master'"
    ;;
  *)
    echo "usage: bash infra/spark-cluster.sh start|stop|status|env [--workers N] [--cores C] [--memory M]" >&2
    exit 64
    ;;
esac
