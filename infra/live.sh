#!/usr/bin/env bash
# Live mode: the product as a user watches it. A synthetic soccer game (with a disorder preset) is
# replayed into a Kafka topic at its own pace, as it would arrive from the field; Airflow's
# scheduler runs the DAGs every minute on it (ingest_kafka, then join_stream, aggregate_stream,
# topk_stream, with late_repair), every stage a client of the shared Spark
# Connect server; the quality report updates every minute.
#
#   bash infra/live.sh start [--rate R] [--minutes M] [--preset P] [--seed S]
#                             start the broker, the Spark Connect server and Airflow, then the
#                             replay, and print the UI's address. --rate: the sensors' rates as a
#                             share of the papers' (1 = ~10,800 tuples/s, 0.1 = ~1,100; default
#                             0.1); --minutes: how much play to replay (default 60); --preset: the
#                             disorder (default hpm_game1)
#   bash infra/live.sh stop   stop the replay, Airflow, and the server and broker if start started them
#   bash infra/live.sh status the replay, Airflow and the DAGs' latest runs
#   bash infra/live.sh env    the session's settings (eval "$(bash infra/live.sh env)" to run the
#                             airflow CLI or a stage against it)
#
# Every start is a new session under OOO_LIVE_DIR=.local/live/<time> (`current` links to it): its
# lake, its Airflow home (SQLite), its configuration (live.toml: the topic's declared source `live`
# and the DAGs' Params' defaults), the replay's log. The generated game itself is kept in
# .local/live/seed (made once per rate, length, preset and seed; its own lake), so a second start
# of the same replay skips straight to sending. Ports: OOO_AIRFLOW_PORT (8080), the broker's
# OOO_KAFKA_PORT (9092), the server's OOO_SPARK_CONNECT_PORT (15002).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

live_root="${OOO_LIVE_DIR:-$OOO_LOCAL/live}"
say() { echo "[live] $*"; }
py() { "$OOO_SPARK_VENV/bin/python" "$@"; }

rate=0.1; minutes=60; preset=hpm_game1; seed=7
cmd="${1:-start}"; shift || true
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --preset) preset="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    *) echo "usage: bash infra/live.sh start [--rate R] [--minutes M] [--preset P] [--seed S] | stop | status | env" >&2; exit 64 ;;
  esac
done

# the DAGs live mode unpauses: the Kafka ingest, the stream DAGs and what they trigger
# (join_stream adapts its retention every L inside each run's pass)
DAGS=(ingest_kafka join_stream aggregate_stream late_repair topk_stream)

session_env() {  # the environment of the session in $1
  local s=$1
  export AIRFLOW_HOME="$s/airflow"
  export OOO_CONFIG="$s/live.toml"
  export OOO_LAKE_ROOT="$s/lake"
  export OOO_KAFKA_DATA="${OOO_KAFKA_DATA:-$live_root/kafka}"
}

case "$cmd" in
  start)
    bash "$here/setup.sh" >/dev/null
    bash "$here/kafka.sh" install >/dev/null
    mkdir -p "$live_root"
    if [ -L "$live_root/current" ] && [ -f "$live_root/current/producer.pid" ] \
        && kill -0 "$(cat "$live_root/current/producer.pid")" 2>/dev/null; then
      say "a live session is running ($(readlink "$live_root/current")): bash infra/live.sh stop first" >&2
      exit 1
    fi
    session="$live_root/$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$session"
    ln -sfn "$session" "$live_root/current"
    : >"$session/started"
    export OOO_KAFKA_DATA="${OOO_KAFKA_DATA:-$live_root/kafka}"
    if ! bash "$here/kafka.sh" status >/dev/null 2>&1; then
      bash "$here/kafka.sh" start
      echo kafka >>"$session/started"
    fi
    eval "$(bash "$here/kafka.sh" env)"
    # the shared server: the project's Spark settings (not the session's, which do not exist yet)
    if ! bash "$here/spark-connect.sh" status >/dev/null 2>&1; then
      bash "$here/spark-connect.sh" start
      echo spark-connect >>"$session/started"
    fi
    eval "$(bash "$here/spark-connect.sh" env)"
    session_env "$session"

    # the game: generated and ingested once into a lake of its own (the replay's input)
    seconds=$((minutes * 60))
    seed_lake="$live_root/seed/lake"
    say "the game: ${minutes} min of play at ${rate} x the sensors' rates, disorder $preset (seed $seed)"
    OOO_LAKE_ROOT="$seed_lake" OOO_CONFIG="" OOO_WORK_DIR="$live_root/seed" \
      py -m outoforder.stages replay --model "$preset" --seconds "$seconds" --seed "$seed" --rate "$rate" \
      --part-s 60 --quiet
    source_id="$(py -c 'import sys; from outoforder.stages.ingest.replay import replay_source as r
print(r(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])) + "-parts60s")' \
      "$preset" "$seconds" "$seed" "$rate")"
    topic="live-$(basename "$session" | tr 'A-Z' 'a-z')"
    # the topic and the declaration that reads it back, before anything is sent
    OOO_LAKE_ROOT="$seed_lake" OOO_CONFIG="" py -m outoforder.stages produce --source "$source_id" \
      --topic "$topic" --name live --declaration "$session/source.toml" --only-declare --live --quiet
    {
      echo "# live mode (infra/live.sh): the replayed topic, and the DAGs' Params for its scheduled runs"
      cat "$session/source.toml"
      echo
      echo "[dags]"
      echo 'source = "live"'
      echo
      echo "# the stream DAGs end within the same minute: one of their reports rebuilds the cumulative page,"
      echo "# which shows every run's verdicts; no page of its own per run (four a minute)"
      echo "[quality]"
      echo "cumulative_every_s = 50"
      echo "run_pages = false"
      echo
      echo "# a minute of a live stream is small: planning and re-planning cost more than the work"
      echo "[spark]"
      echo "shuffle_partitions = 2"
      echo "[spark.conf]"
      echo '"spark.sql.adaptive.enabled" = "false"'
      echo '"spark.databricks.delta.snapshotPartitions" = "1"'
      echo "# and compiling each query's code (a new class per interval: its bounds are inlined) costs more"
      echo "# than interpreting its expressions"
      echo '"spark.sql.codegen.wholeStage" = "false"'
      echo '"spark.sql.codegen.factoryMode" = "NO_CODEGEN"'
      echo "# except the join's: it compares every candidate pair of a bucket, where compiled code pays"
      echo '[spark.stage_conf.join-stream]'
      echo '"spark.sql.codegen.wholeStage" = "true"'
      echo '"spark.sql.codegen.factoryMode" = "FALLBACK"'
    } >"$OOO_CONFIG"

    # the DAG files do not change during a session: parse them every 5 minutes, not every 30 s
    export AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="${AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL:-300}"
    export AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL="$AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"
    bash "$here/airflow.sh" start
    eval "$(bash "$here/airflow.sh" env)"
    say "unpausing ${DAGS[*]}"
    for _ in $(seq 1 60); do  # the DAG processor's first parse
      if airflow dags list -o plain 2>/dev/null | grep -q '^topk_stream'; then break; fi
      sleep 2
    done
    for d in "${DAGS[@]}"; do
      airflow dags unpause "$d" >/dev/null
    done
    # the replay: the game's tuples in their arrival order and at its pace, times shifted to now
    OOO_LAKE_ROOT="$seed_lake" OOO_CONFIG="" setsid "$OOO_SPARK_VENV/bin/python" -m outoforder.stages produce \
      --source "$source_id" --topic "$topic" --speed 1 --live >"$session/producer.log" 2>&1 </dev/null &
    echo $! >"$session/producer.pid"
    echo "$topic" >"$session/topic"
    say "replaying $source_id into topic $topic (log $session/producer.log)"
    say "session $session; stop with: bash infra/live.sh stop"
    ;;
  stop)
    if [ ! -L "$live_root/current" ]; then say "no live session"; exit 0; fi
    session="$(readlink "$live_root/current")"
    session_env "$session"
    if [ -f "$session/producer.pid" ]; then
      kill -TERM -- "-$(cat "$session/producer.pid")" 2>/dev/null || kill -TERM "$(cat "$session/producer.pid")" 2>/dev/null || true
      rm -f "$session/producer.pid"
      say "replay stopped"
    fi
    bash "$here/airflow.sh" stop
    if grep -qx spark-connect "$session/started" 2>/dev/null; then bash "$here/spark-connect.sh" stop; fi
    if grep -qx kafka "$session/started" 2>/dev/null; then bash "$here/kafka.sh" stop; fi
    rm -f "$session/started"
    ;;
  status)
    if [ ! -L "$live_root/current" ]; then say "no live session"; exit 3; fi
    session="$(readlink "$live_root/current")"
    session_env "$session"
    if [ -f "$session/producer.pid" ] && kill -0 "$(cat "$session/producer.pid")" 2>/dev/null; then
      say "replay running into $(cat "$session/topic")"
    else
      say "replay not running"
    fi
    bash "$here/airflow.sh" status || true
    eval "$(bash "$here/airflow.sh" env)"
    # each stream DAG's lag per run, its trend, the runs' states and freshness, and whether the
    # pipeline keeps pace: what the UI's Browse > Live pace page shows
    PYTHONPATH="$OOO_REPO/plugins${PYTHONPATH:+:$PYTHONPATH}" "$OOO_AIRFLOW_VENV/bin/python" -m outoforder_airflow.pace
    ;;
  env)
    if [ ! -L "$live_root/current" ]; then say "no live session" >&2; exit 3; fi
    session_env "$(readlink "$live_root/current")"
    bash "$here/airflow.sh" env
    bash "$here/spark-connect.sh" env
    bash "$here/kafka.sh" env
    ;;
  *)
    echo "usage: bash infra/live.sh start [--rate R] [--minutes M] [--preset P] [--seed S] | stop | status | env" >&2
    exit 64
    ;;
esac
