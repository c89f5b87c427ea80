#!/usr/bin/env bash
# MinIO, the S3-compatible object store under an s3a:// lake, the landing bucket and published
# reports, on loopback in the background.
#
#   bash infra/minio.sh install   build MinIO from the Go module proxy with `go install` (first time
#                                 ~8 min on 2 cores; cached under OOO_HOME/bin, keyed by version)
#   bash infra/minio.sh start     install (idempotent), start, wait until ready, create the buckets
#   bash infra/minio.sh stop      stop it
#   bash infra/minio.sh status    running or not, and where
#   bash infra/minio.sh env       the OOO_S3_* settings that point the pipeline at it, with the
#                                 pipeline's own keys (eval "$(bash infra/minio.sh env)")
#   bash infra/minio.sh root-env  the root user's keys (the console's login), only when asked
#
# Credentials: generated at the first start (random, never in the repository), kept owner-only in
# $OOO_MINIO_DATA/.credentials: the root user (the operator's: buckets, users, policies) and the
# pipeline's own user, allowed the deployment's buckets and nothing else (objectstore.grant_pipeline).
# Nothing prints them but `env` and `root-env`.
#
# Defaults (override in the environment): OOO_MINIO_PORT=9000 (S3 API), OOO_MINIO_CONSOLE_PORT=9001,
# data under OOO_MINIO_DATA=.local/minio, buckets OOO_MINIO_BUCKETS="lake landing reports".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

# Pinned: the pseudo-version `go install github.com/minio/minio@latest` resolved to on 2026-11-22
# (MinIO stopped tagging module versions that `go install` accepts).
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
bin_dir="$OOO_HOME/bin/minio-$(echo "$MINIO_VERSION" | cut -d- -f2)"
minio="$bin_dir/minio"
port="${OOO_MINIO_PORT:-9000}"
console="${OOO_MINIO_CONSOLE_PORT:-9001}"
data="${OOO_MINIO_DATA:-$OOO_LOCAL/minio}"
creds="$data/.credentials"
buckets="${OOO_MINIO_BUCKETS:-lake landing reports}"
url="http://127.0.0.1:$port"
pidfile="$data/.minio.pid"
log="$data/.minio.log"
say() { echo "[minio] $*"; }

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
ready() { curl -fsS -o /dev/null "$url/minio/health/ready" 2>/dev/null; }

make_credentials() {  # once per data folder, owner-only
  [ -s "$creds" ] && return
  if [ -d "$data/.minio.sys" ]; then
    say "$data holds a MinIO made before generated credentials: remove it (or write $creds)" >&2
    exit 1
  fi
  _ooo_make_secrets "$creds" MINIO_ROOT_USER=root MINIO_ROOT_PASSWORD PIPELINE_ACCESS_KEY=pipeline \
    PIPELINE_SECRET_KEY
}
credential() {  # the value of one key of the credentials file
  [ -s "$creds" ] || { say "no credentials yet in $creds: run bash infra/minio.sh start first" >&2; exit 1; }
  _ooo_secret "$creds" "$1"
}

install() {
  if [ -x "$minio" ]; then return; fi
  command -v go >/dev/null || { say "Go is not installed: MinIO is built with go install" >&2; exit 1; }
  say "building MinIO $MINIO_VERSION with go install into $bin_dir (first time only, ~8 min)"
  mkdir -p "$bin_dir"
  # the module cache lives in OOO_HOME too, so a rebuild after a cache wipe of the binary is quick
  GOPATH="$OOO_HOME/go" GOBIN="$bin_dir.tmp" GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION"
  mv "$bin_dir.tmp/minio" "$minio"
  rmdir "$bin_dir.tmp"
}

case "${1:-start}" in
  install)
    install
    say "installed: $minio"
    ;;
  start)
    install
    mkdir -p "$data"
    make_credentials
    MINIO_ROOT_USER="$(credential MINIO_ROOT_USER)"; MINIO_ROOT_PASSWORD="$(credential MINIO_ROOT_PASSWORD)"
    export MINIO_ROOT_USER MINIO_ROOT_PASSWORD
    if running; then
      say "already running (pid $(cat "$pidfile")): S3 API at $url"
    else
      if ready; then say "port $port is taken by another server: set OOO_MINIO_PORT" >&2; exit 1; fi
      say "starting MinIO on $url (data in $data, log $log)"
      MINIO_BROWSER=on setsid "$minio" server "$data" --address "127.0.0.1:$port" \
        --console-address "127.0.0.1:$console" >"$log" 2>&1 < /dev/null &
      echo $! > "$pidfile"
      for _ in $(seq 1 60); do
        if ready; then break; fi
        if ! running; then say "MinIO exited; last lines of $log:" >&2; tail -20 "$log" >&2; exit 1; fi
        sleep 0.5
      done
      ready || { say "not ready after 30 s; see $log" >&2; exit 1; }
    fi
    # as root: the buckets and the pipeline's user (keys in the environment, not on a command line)
    OOO_S3_ENDPOINT="$url" OOO_S3_ACCESS_KEY="$MINIO_ROOT_USER" OOO_S3_SECRET_KEY="$MINIO_ROOT_PASSWORD" \
      OOO_S3_PIPELINE_ACCESS_KEY="$(credential PIPELINE_ACCESS_KEY)" \
      OOO_S3_PIPELINE_SECRET_KEY="$(credential PIPELINE_SECRET_KEY)" \
      "$OOO_SPARK_VENV/bin/python" -m outoforder.stages buckets $buckets --pipeline-user
    say "ready: S3 API at $url, console at http://127.0.0.1:$console (keys: bash infra/minio.sh env | root-env)"
    ;;
  stop)
    if running; then
      pid="$(cat "$pidfile")"
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
      say "stopped"
    else
      say "not running"
    fi
    rm -f "$pidfile"
    ;;
  status)
    if running && ready; then say "running (pid $(cat "$pidfile")): S3 API at $url"; else say "not running"; exit 3; fi
    ;;
  env)
    echo "export OOO_S3_ENDPOINT='$url'"
    echo "export OOO_S3_ACCESS_KEY='$(credential PIPELINE_ACCESS_KEY)'"
    echo "export OOO_S3_SECRET_KEY='$(credential PIPELINE_SECRET_KEY)'"
    ;;
  root-env)
    echo "export OOO_S3_ENDPOINT='$url'"
    echo "export OOO_S3_ACCESS_KEY='$(credential MINIO_ROOT_USER)'"
    echo "export OOO_S3_SECRET_KEY='$(credential MINIO_ROOT_PASSWORD)'"
    ;;
  *)
    echo "usage: bash infra/minio.sh install|start|stop|status|env|root-env" >&2
    exit 64
    ;;
esac
