#!/usr/bin/env bash
# The shared Spark application: a Spark Connect server that every task of the pipeline is a client
# of (Airflow's stage tasks, the live mode, the DAG tests), on loopback, in the background, under a
# supervisor that restarts it when it dies. Beside it, the stage runner (outoforder.stages.runner):
# a warm Python process with the stages' imports done, which Airflow's tasks ask to fork their
# stage, on a Unix socket only the owner can reach ($OOO_SPARK_CONNECT_DIR/runner.sock).
#
#   bash infra/spark-connect.sh start    set up (idempotent), start, wait until a client gets an
#                                        answer, print its address
#   bash infra/spark-connect.sh stop     stop the supervisor and the server
#   bash infra/spark-connect.sh restart  stop, then start (after a change of settings or code)
#   bash infra/spark-connect.sh status   healthy (exit 0), not running (3), not answering (1)
#   bash infra/spark-connect.sh env      the settings that make a stage its client
#                                        (eval "$(bash infra/spark-connect.sh env)"); the secret is
#                                        read from its file when evaluated, not printed
#
# The server runs the project's Spark settings (include/config/outoforder.toml, OOO_CONFIG and the
# OOO_* variables as they are at start): Delta's jars and extensions, the lake's storage, and the
# master, local[2] by default or the standalone cluster's (eval "$(bash infra/spark-cluster.sh env)"
# first). They are written with its own (port, a secret generated at first start, checkpoints, UI)
# to a properties file only its owner can read. Its Python workers run the Spark venv's Python, so
# UDFs and mapInArrow see the project's code. A new server is needed for new code or settings:
# restart.
#
# Defaults (override in the environment): OOO_SPARK_CONNECT_PORT=15002 (clients),
# OOO_SPARK_CONNECT_UI_PORT=4040 (its UI and REST API, loopback), state (logs, the secret,
# checkpoints, scratch space) under OOO_SPARK_CONNECT_DIR=.local/spark-connect; the server JVM's
# options OOO_SPARK_CONNECT_JAVA_OPTIONS (default: the optimising compiler, and a heap that gives
# back what a burst committed; outoforder.spark.server.JAVA_OPTIONS).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

port="${OOO_SPARK_CONNECT_PORT:-15002}"
ui_port="${OOO_SPARK_CONNECT_UI_PORT:-4040}"
dir="${OOO_SPARK_CONNECT_DIR:-$OOO_LOCAL/spark-connect}"
remote="sc://localhost:$port"
supervisor_pid="$dir/supervisor.pid"
server_pid="$dir/serve.pid"
log="$dir/serve.log"
say() { echo "[spark-connect] $*"; }

running() { [ -f "$supervisor_pid" ] && kill -0 "$(cat "$supervisor_pid")" 2>/dev/null; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
probe() {  # a client's round trip: the server answers queries, not only the port
  SPARK_CONNECT_AUTHENTICATE_TOKEN="$(cat "$dir/token")" \
    "$OOO_SPARK_VENV/bin/python" -m outoforder.spark.server probe "$remote" 2>>"$dir/probe.log"
}

properties() {  # the server's settings, from the project's as they are now (owner-only)
  (umask 077
   "$OOO_SPARK_VENV/bin/python" -m outoforder.spark.server properties --port "$port" --ui-port "$ui_port" \
     --dir "$dir" --token-file "$dir/token" >"$dir/spark.properties.new")
  mv "$dir/spark.properties.new" "$dir/spark.properties"
}

serve() {  # the server in the foreground: spark-submit execs its JVM
  mkdir -p "$dir/checkpoints" "$dir/tmp"
  SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON="$OOO_SPARK_VENV/bin/python" \
    exec "$OOO_SPARK_VENV/bin/spark-submit" --properties-file "$dir/spark.properties" \
    --class org.apache.spark.sql.connect.service.SparkConnectServer spark-internal
}

runner() {  # the stage runner in the foreground
  PYSPARK_PYTHON="$OOO_SPARK_VENV/bin/python" \
    exec "$OOO_SPARK_VENV/bin/python" -m outoforder.stages.runner serve --socket "$dir/runner.sock"
}

keep() {  # name: run `bash $0 name` again whenever it exits, until told to stop
  local name=$1 restarts=0 rc child
  stopping=0
  trap 'stopping=1; [ -n "${child:-}" ] && kill -TERM "$child" 2>/dev/null' TERM INT
  while [ "$stopping" -eq 0 ]; do
    bash "$0" "$name" >>"$dir/$name.log" 2>&1 &
    child=$!
    echo "$child" >"$dir/$name.pid"
    rc=0
    wait "$child" || rc=$?
    # a trapped signal interrupts wait: wait again for it to be gone
    while kill -0 "$child" 2>/dev/null; do wait "$child" || true; done
    [ "$stopping" -eq 1 ] && break
    restarts=$((restarts + 1))
    echo "[spark-connect] $(date -u +%FT%TZ) $name exited (status $rc): restart $restarts" >>"$dir/$name.log"
    sleep $((restarts < 5 ? 2 : 15))
  done
  rm -f "$dir/$name.pid"
}

supervise() {  # the server and the runner, each restarted when it exits, until stopped
  bash "$0" keep serve &
  local a=$!
  bash "$0" keep runner &
  local b=$!
  trap 'kill -TERM "$a" "$b" 2>/dev/null' TERM INT
  wait "$a" "$b" || true
  while kill -0 "$a" 2>/dev/null || kill -0 "$b" 2>/dev/null; do wait || true; done
}

case "${1:-start}" in
  start)
    bash "$here/setup.sh" >/dev/null
    mkdir -p "$dir"
    chmod 700 "$dir"
    if running; then
      if probe >/dev/null; then
        say "already running: $remote (UI http://127.0.0.1:$ui_port)"
        exit 0
      fi
      say "running but not answering yet; waiting"
    else
      if listening; then
        say "port $port is taken by another server: set OOO_SPARK_CONNECT_PORT" >&2
        exit 1
      fi
      if [ ! -s "$dir/token" ]; then  # the clients' shared secret, made once, owner-only
        (umask 077; "$OOO_SPARK_VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(32))' >"$dir/token")
      fi
      properties  # a settings error stops here, before anything runs
      rm -f "$dir/runner.sock"  # a socket left by an earlier server: wait for the new runner's
      say "starting the server at $remote (UI http://127.0.0.1:$ui_port; log $log)"
      # a session of its own, so that stop ends the supervisor, spark-submit and the JVM together
      setsid bash "$0" supervise >>"$dir/supervisor.log" 2>&1 </dev/null &
      echo $! >"$supervisor_pid"
    fi
    t0=$SECONDS
    until listening; do
      if ! running; then say "the supervisor exited; last lines of $log:" >&2; tail -30 "$log" >&2; exit 1; fi
      if [ $((SECONDS - t0)) -ge 180 ]; then say "not listening after 180 s; see $log" >&2; exit 1; fi
      sleep 0.5
    done
    until probe >/dev/null; do
      if [ $((SECONDS - t0)) -ge 240 ]; then
        say "listening but not answering after 240 s; see $log and $dir/probe.log" >&2
        exit 1
      fi
      sleep 1
    done
    until [ -S "$dir/runner.sock" ]; do
      if [ $((SECONDS - t0)) -ge 240 ]; then say "the stage runner is not up; see $dir/runner.log" >&2; exit 1; fi
      sleep 0.5
    done
    say "ready in $((SECONDS - t0)) s: $remote, master $(grep '^spark.master ' "$dir/spark.properties" | cut -d' ' -f2)"
    ;;
  stop)
    if running; then
      pid="$(cat "$supervisor_pid")"
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -KILL -- "-$pid" 2>/dev/null || true
      say "stopped"
    else
      say "not running"
    fi
    rm -f "$supervisor_pid" "$server_pid"
    ;;
  restart)
    bash "$0" stop
    exec bash "$0" start
    ;;
  status)
    if ! running; then say "not running"; exit 3; fi
    if answer="$(probe)"; then
      say "running: $remote ($answer; UI http://127.0.0.1:$ui_port)"
    else
      say "running but not answering: see $log" >&2
      exit 1
    fi
    ;;
  env)
    echo "export OOO_SPARK_REMOTE='$remote'"
    echo "export OOO_STAGE_RUNNER='$dir/runner.sock'"
    echo "export SPARK_CONNECT_AUTHENTICATE_TOKEN=\"\$(cat '$dir/token')\""
    ;;
  serve) serve ;;
  runner) runner ;;
  keep) keep "$2" ;;
  supervise) supervise ;;
  *)
    echo "usage: bash infra/spark-connect.sh start|stop|restart|status|env" >&2
    exit 64
    ;;
esac
