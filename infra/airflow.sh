#!/usr/bin/env bash
# Airflow standalone (scheduler, DAG processor, API server + UI, triggerer) with the project's DAGs
# and plugins, tuned for a 2-core machine, in the background.
#
#   bash infra/airflow.sh start     set up (idempotent), start, wait until healthy, print the UI address
#   bash infra/airflow.sh stop      stop it (and every process it started)
#   bash infra/airflow.sh status    running or not, and where
#   bash infra/airflow.sh foreground  the same in the foreground (containers)
#   bash infra/airflow.sh env       print the environment it runs with (eval "$(bash infra/airflow.sh env)"
#                                   to use the airflow CLI against it)
#
# Defaults (override in the environment): AIRFLOW_HOME=.local/airflow, OOO_AIRFLOW_PORT=8080 (the UI
# and API), OOO_AIRFLOW_LOG_PORT=8793 and OOO_AIRFLOW_TRIGGER_LOG_PORT=8794 (log servers),
# SQLite metadata DB (PostgreSQL when AIRFLOW__DATABASE__SQL_ALCHEMY_CONN points at one: see
# infra/postgres.sh), LocalExecutor with 4 task slots, one API server worker, one parsing process.
# Spark: every stage task is a client of the shared Spark Connect server (infra/spark-connect.sh,
# started here when it is not running, and stopped again by stop if this script started it): the
# connection outoforder_spark (a spark_connect connection to it, its secret read from the server's
# token file). The server runs spark.master (OOO_SPARK_MASTER), so
# `eval "$(bash infra/spark-cluster.sh env)"` before start puts every stage on the cluster. Set
# AIRFLOW_CONN_OUTOFORDER_SPARK to a `spark` connection ({"conn_type": "spark", "host": "local[2]"})
# for spark-submit, one application per task, instead.
# The lake, reports and data folders follow the usual OOO_* variables (README, Configuration).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$OOO_REPO/.local/airflow}"
port="${OOO_AIRFLOW_PORT:-8080}"
export AIRFLOW__CORE__DAGS_FOLDER="$OOO_REPO/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$OOO_REPO/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
# 2 cores: at most 4 tasks at once (each a client of the shared Spark server), 2 per DAG
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"
export AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG="${AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG:-2}"
export AIRFLOW__API__WORKERS=1
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"
export AIRFLOW__API__PORT="$port"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$port"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$port/execution/"
# the log servers of the task runner and the triggerer (Airflow's defaults 8793, 8794)
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="${OOO_AIRFLOW_LOG_PORT:-8793}"
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="${OOO_AIRFLOW_TRIGGER_LOG_PORT:-8794}"
export AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES=1
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
export AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL="${AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL:-30}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
# SQLite by default. A writer waits for the database lock up to 60 s (SQLite's busy timeout) rather
# than 5: an `airflow backfill create` or `dags trigger` writing while a busy scheduler does would
# otherwise fail with "database is locked".
mkdir -p "$AIRFLOW_HOME"
AIRFLOW_HOME="$(cd "$AIRFLOW_HOME" && pwd)"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db?timeout=60}"
# The stages' Spark: the shared Spark Connect server, unless the environment names another
connect_dir="${OOO_SPARK_CONNECT_DIR:-$OOO_LOCAL/spark-connect}"
if [ -z "${AIRFLOW_CONN_OUTOFORDER_SPARK:-}" ]; then
  own_server=1
  export AIRFLOW_CONN_OUTOFORDER_SPARK="{\"conn_type\":\"spark_connect\",\"host\":\"localhost\",\"port\":${OOO_SPARK_CONNECT_PORT:-15002},\"extra\":{\"token_file\":\"$connect_dir/token\",\"runner\":\"$connect_dir/runner.sock\"}}"
else
  own_server=0
fi
export PATH="$OOO_SPARK_VENV/bin:$OOO_AIRFLOW_VENV/bin:$PATH"
pidfile="$AIRFLOW_HOME/standalone.pid"
log="$AIRFLOW_HOME/standalone.log"
url="http://127.0.0.1:$port"
say() { echo "[airflow] $*"; }

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
healthy() { curl -fsS "$url/api/v2/monitor/health" 2>/dev/null | grep -q '"scheduler": *{[^}]*"status": *"healthy"'; }
password() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("admin",""))' \
               "$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated" 2>/dev/null || true; }

case "${1:-start}" in
  start)
    bash "$here/setup.sh"
    mkdir -p "$AIRFLOW_HOME"
    if running; then
      say "already running (pid $(cat "$pidfile")): UI at $url"
      exit 0
    fi
    if curl -fsS -o /dev/null "$url/api/v2/monitor/health" 2>/dev/null; then
      say "port $port is taken by another server: set OOO_AIRFLOW_PORT" >&2
      exit 1
    fi
    if [ "$own_server" -eq 1 ]; then
      if ! bash "$here/spark-connect.sh" status >/dev/null 2>&1; then
        bash "$here/spark-connect.sh" start
        touch "$AIRFLOW_HOME/spark-connect.started"  # stop ends it again
      fi
    fi
    db_kind="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN%%:*}"; [ "$db_kind" = sqlite ] && db_kind="SQLite under $AIRFLOW_HOME"
    say "migrating the metadata DB ($db_kind)"
    airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log" >&2; exit 1; }
    say "starting airflow standalone (log: $log)"
    # a session of its own, so that stop can end every process standalone starts
    setsid airflow standalone >"$log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 1 180); do
      if healthy; then break; fi
      if ! running; then say "standalone exited; last lines of $log:" >&2; tail -30 "$log" >&2; exit 1; fi
      sleep 1
    done
    healthy || { say "not healthy after 180 s; see $log" >&2; exit 1; }
    say "ready: UI at $url (user admin, password $(password)); reports at $url/outoforder/"
    say "stop with: bash infra/airflow.sh stop"
    ;;
  foreground)
    # for containers (infra/docker/docker-compose.yml): the same settings, in the foreground
    mkdir -p "$AIRFLOW_HOME"
    airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log" >&2; exit 1; }
    exec airflow standalone
    ;;
  stop)
    if running; then
      pid="$(cat "$pidfile")"
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      say "stopped"
    else
      say "not running"
    fi
    rm -f "$pidfile"
    if [ -f "$AIRFLOW_HOME/spark-connect.started" ]; then
      bash "$here/spark-connect.sh" stop
      rm -f "$AIRFLOW_HOME/spark-connect.started"
    fi
    ;;
  status)
    if running && healthy; then say "running (pid $(cat "$pidfile")): UI at $url"; else say "not running"; exit 3; fi
    ;;
  env)
    env | grep -E '^(AIRFLOW_HOME|AIRFLOW__|AIRFLOW_CONN_|PATH=|PYSPARK_PYTHON|OOO_)' | sed -E "s/^([^=]+)=(.*)$/export \1='\2'/"
    ;;
  *)
    echo "usage: bash infra/airflow.sh start|stop|status|env|foreground" >&2
    exit 64
    ;;
esac
