#!/usr/bin/env bash
# PostgreSQL as Airflow's metadata database (instead of the default SQLite), from Debian's
# postgresql package, on loopback in the background.
#
#   bash infra/postgres.sh start   install the package if missing, initdb once, start, create the
#                                  database and user, print the SQLAlchemy URL
#   bash infra/postgres.sh stop
#   bash infra/postgres.sh status
#   bash infra/postgres.sh url     the URL for AIRFLOW__DATABASE__SQL_ALCHEMY_CONN
#   bash infra/postgres.sh env     export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=<url>
#                                  (eval "$(bash infra/postgres.sh env)"; infra/airflow.sh then uses it)
#
# Defaults (override in the environment): OOO_PG_PORT=5433, data under OOO_PG_DATA=.local/postgres,
# database, user and password "airflow" (loopback only). PostgreSQL refuses to run as root, so
# under root the server runs as the postgres system user.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

port="${OOO_PG_PORT:-5433}"
data="${OOO_PG_DATA:-$OOO_LOCAL/postgres}"
db="${OOO_PG_DB:-airflow}"
url="postgresql+psycopg2://$db:$db@127.0.0.1:$port/$db"
say() { echo "[postgres] $*"; }

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
running() { [ -n "$(bindir)" ] && as_pg "$(bindir)/pg_ctl" -D "$data" status >/dev/null 2>&1; }

case "${1:-start}" in
  start)
    if [ -z "$(bindir)" ]; then
      say "installing Debian's postgresql"
      sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
      $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
    fi
    bin="$(bindir)"
    if [ ! -f "$data/PG_VERSION" ]; then
      say "initdb in $data"
      mkdir -p "$data"
      [ "$(id -u)" -eq 0 ] && chown postgres: "$data"
      chmod 700 "$data"
      as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >"$data.initdb.log" 2>&1 \
        || { cat "$data.initdb.log" >&2; exit 1; }
    fi
    if running; then
      say "already running on 127.0.0.1:$port"
    else
      as_pg "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $data -c max_connections=100" start >/dev/null \
        || { tail -20 "$data/server.log" >&2; exit 1; }
    fi
    psql_() { as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -v ON_ERROR_STOP=1 -qtA "$@"; }
    [ "$(psql_ -c "SELECT 1 FROM pg_roles WHERE rolname='$db'")" = 1 ] \
      || psql_ -c "CREATE ROLE $db LOGIN PASSWORD '$db'"
    [ "$(psql_ -c "SELECT 1 FROM pg_database WHERE datname='$db'")" = 1 ] \
      || psql_ -c "CREATE DATABASE $db OWNER $db"
    say "ready: $url"
    ;;
  stop)
    if running; then as_pg "$(bindir)/pg_ctl" -D "$data" -m fast -w stop >/dev/null; say "stopped"; else say "not running"; fi
    ;;
  status)
    if running; then say "running: $url"; else say "not running"; exit 3; fi
    ;;
  url)
    echo "$url"
    ;;
  env)
    echo "export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='$url'"
    ;;
  *)
    echo "usage: bash infra/postgres.sh start|stop|status|url|env" >&2
    exit 64
    ;;
esac
