#!/usr/bin/env bash
# Apache Kafka, a single-node broker in KRaft mode (broker and controller in one JVM, no ZooKeeper),
# run from Maven Central jars (infra/maven/kafka/pom.xml; no apache.org tarball), on loopback in
# the background. Topics for the Kafka ingest stage (docs/sources.md, "Kafka topics").
#
#   bash infra/kafka.sh install   fetch the broker's jars with Maven into a cache folder (once)
#   bash infra/kafka.sh start     install (idempotent), format the storage once (cluster id made
#                                 once and kept), write the config, start, wait until the port answers
#   bash infra/kafka.sh stop      stop it (SIGTERM: controlled shutdown, SIGKILL after 30 s)
#   bash infra/kafka.sh status    running or not, and where
#   bash infra/kafka.sh env       export OOO_KAFKA_BOOTSTRAP=127.0.0.1:<port>
#                                 (eval "$(bash infra/kafka.sh env)")
#
# Defaults (override in the environment): OOO_KAFKA_PORT=9092 (clients), OOO_KAFKA_CONTROLLER_PORT=9093
# (KRaft controller, loopback only), data under OOO_KAFKA_DATA=.local/kafka, heap OOO_KAFKA_HEAP=512m.
# The quorum is static (controller.quorum.voters), so both ports may change between starts; the
# storage is formatted once and kept, so topics and offsets survive a restart (rm -rf the data dir
# to start empty).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"
pom="$OOO_REPO/infra/maven/kafka/pom.xml"
jars="$OOO_HOME/jars/kafka-broker-$(_ooo_hash "$pom")"
data="${OOO_KAFKA_DATA:-$OOO_LOCAL/kafka}"
port="${OOO_KAFKA_PORT:-9092}"
cport="${OOO_KAFKA_CONTROLLER_PORT:-9093}"
heap="${OOO_KAFKA_HEAP:-512m}"
bootstrap="127.0.0.1:$port"
pidfile="$data/kafka.pid"
log="$data/logs/server.log"   # log4j2 (the broker's own log)
out="$data/logs/kafka.out"    # the JVM's stdout/stderr (start-up errors, crashes)
say() { echo "[kafka] $*"; }

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
java_major() { env -u JAVA_TOOL_OPTIONS java -version 2>&1 | sed -nE '1s/.*version "([0-9]+).*/\1/p'; }

install() {
  if [ -f "$jars/.complete" ]; then return; fi
  say "fetching the Kafka broker's jars with Maven into $jars"
  rm -rf "$jars"
  mvn -q -B -Dmaven.repo.local="$OOO_HOME/m2" -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$jars"
  touch "$jars/.complete"
}

kafka_java() {  # main class and arguments
  env -u JAVA_TOOL_OPTIONS java -cp "$jars/*" -Dlog4j2.configurationFile="$data/config/log4j2.properties" "$@"
}

write_config() {
  mkdir -p "$data/config" "$data/logs"
  cat >"$data/config/server.properties" <<EOF
# written by kafka.sh at every start: edit the script, not this file
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$data/kraft-logs
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
EOF
  cat >"$data/config/log4j2.properties" <<EOF
status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $log
appender.file.filePattern = $log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 20MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
EOF
}

case "${1:-start}" in
  install)
    install
    say "installed: $(ls "$jars"/*.jar | wc -l) jars in $jars"
    ;;
  start)
    [ "$(java_major)" -ge 17 ] 2>/dev/null || { say "Kafka 4 needs Java 17 or newer" >&2; exit 1; }
    install
    if running; then
      say "already running (pid $(cat "$pidfile")): bootstrap $bootstrap"
      exit 0
    fi
    for p in "$port" "$cport"; do
      if answers "$p"; then say "port $p is taken by another server: set OOO_KAFKA_PORT / OOO_KAFKA_CONTROLLER_PORT" >&2; exit 1; fi
    done
    write_config
    if [ ! -f "$data/kraft-logs/meta.properties" ]; then
      [ -s "$data/cluster.id" ] || kafka_java kafka.tools.StorageTool random-uuid >"$data/cluster.id"
      say "formatting $data/kraft-logs (cluster id $(cat "$data/cluster.id"))"
      kafka_java kafka.tools.StorageTool format -t "$(cat "$data/cluster.id")" \
          -c "$data/config/server.properties" >"$data/logs/format.log" 2>&1 \
        || { cat "$data/logs/format.log" >&2; exit 1; }
    fi
    say "starting Kafka on $bootstrap (controller 127.0.0.1:$cport, data in $data, log $log)"
    t0=$(date +%s%N)
    # the broker is a long-lived server: none of the tests' JVM options (JAVA_TOOL_OPTIONS) apply
    # shellcheck disable=SC2086
    setsid nohup env -u JAVA_TOOL_OPTIONS java -Xms128m -Xmx"$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$data/config/log4j2.properties" -Dkafka.logs.dir="$data/logs" \
      ${OOO_KAFKA_JVM_OPTS:-} -cp "$jars/*" kafka.Kafka "$data/config/server.properties" \
      >"$out" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 1 120); do
      if answers "$port"; then break; fi
      if ! running; then say "Kafka exited; last lines of $log and $out:" >&2; tail -20 "$log" "$out" >&2 || true; rm -f "$pidfile"; exit 1; fi
      sleep 0.5
    done
    answers "$port" || { say "port $port not answering after 60 s; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; }
    say "ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms (pid $(cat "$pidfile")): bootstrap $bootstrap"
    ;;
  stop)
    if running; then
      pid="$(cat "$pidfile")"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; say "killed (no clean shutdown in 30 s)"; else say "stopped"; fi
    else
      say "not running"
    fi
    rm -f "$pidfile"
    ;;
  status)
    if running && answers "$port"; then say "running (pid $(cat "$pidfile")): bootstrap $bootstrap"; else say "not running"; exit 3; fi
    ;;
  env)
    echo "export OOO_KAFKA_BOOTSTRAP=$bootstrap"
    ;;
  *)
    echo "usage: bash infra/kafka.sh install|start|stop|status|env" >&2
    exit 64
    ;;
esac
