#!/usr/bin/env bash
# PostgreSQL as Airflow's metadata database (instead of the default SQLite), from Debian's
# postgresql package, on loopback in the background.
#
#   bash infra/postgres.sh start   install the package if missing, initdb once, start, create the
#                                  database and its user
#   bash infra/postgres.sh stop
#   bash infra/postgres.sh status
#   bash infra/postgres.sh url     the URL for AIRFLOW__DATABASE__SQL_ALCHEMY_CONN (with the password)
#   bash infra/postgres.sh env     export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=<url>
#                                  (eval "$(bash infra/postgres.sh env)"; infra/airflow.sh then uses it)
#
# Password authentication (scram-sha-256) for every connection, local ones included. The first
# start generates two random passwords, the superuser's (postgres) and the database user's, and
# keeps them owner-only (mode 0600) in $OOO_PG_DATA.credentials; url and env print the user's,
# nothing else prints either. Defaults (override in the environment): OOO_PG_PORT=5433, data under
# OOO_PG_DATA=.local/postgres, database and user OOO_PG_DB=airflow (loopback only). PostgreSQL
# refuses to run as root, so under root the server runs as the postgres system user.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/env.sh"

port="${OOO_PG_PORT:-5433}"
data="${OOO_PG_DATA:-$OOO_LOCAL/postgres}"
db="${OOO_PG_DB:-airflow}"
creds="$data.credentials"
shown="postgresql+psycopg2://$db:***@127.0.0.1:$port/$db"
say() { echo "[postgres] $*"; }

credential() {  # the value of one key of the credentials file
  [ -s "$creds" ] || { say "no credentials yet in $creds: run bash infra/postgres.sh start first" >&2; exit 1; }
  _ooo_secret "$creds" "$1"
}
url() { echo "postgresql+psycopg2://$db:$(credential USER_PASSWORD)@127.0.0.1:$port/$db"; }

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
      say "initdb in $data (password authentication; passwords generated into $creds)"
      mkdir -p "$data"
      [ "$(id -u)" -eq 0 ] && chown postgres: "$data"
      chmod 700 "$data"
      rm -f "$creds"  # a new cluster, new passwords
      _ooo_make_secrets "$creds" SUPERUSER_PASSWORD USER_PASSWORD
      # initdb reads the superuser's password from a file the server's user can read: one in a
      # private folder of its own, removed at once
      pwdir="$(mktemp -d)"
      (umask 077; credential SUPERUSER_PASSWORD >"$pwdir/pw")
      [ "$(id -u)" -eq 0 ] && chown -R postgres: "$pwdir"
      as_pg "$bin/initdb" -D "$data" -U postgres --auth=scram-sha-256 --pwfile="$pwdir/pw" -E UTF8 \
        >"$data.initdb.log" 2>&1 || { rm -rf "$pwdir"; cat "$data.initdb.log" >&2; exit 1; }
      rm -rf "$pwdir"
    elif [ ! -s "$creds" ]; then
      say "$data was made before passwords were generated (trust authentication): remove it" >&2
      exit 1
    fi
    if running; then
      say "already running on 127.0.0.1:$port"
    else
      as_pg "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $data -c max_connections=100" start >/dev/null \
        || { tail -20 "$data/server.log" >&2; exit 1; }
    fi
    # the password in psql's environment and the statement on its standard input: neither is on
    # a command line
    psql_() {
      PGPASSWORD="$(credential SUPERUSER_PASSWORD)" as_pg "$bin/psql" -h 127.0.0.1 -p "$port" \
        -U postgres -v ON_ERROR_STOP=1 -qtA "$@"
    }
    [ "$(echo "SELECT 1 FROM pg_roles WHERE rolname='$db'" | psql_)" = 1 ] \
      || echo "CREATE ROLE $db LOGIN PASSWORD '$(credential USER_PASSWORD)'" | psql_
    [ "$(echo "SELECT 1 FROM pg_database WHERE datname='$db'" | psql_)" = 1 ] \
      || echo "CREATE DATABASE $db OWNER $db" | psql_
    say "ready: $shown (the URL with its password: bash infra/postgres.sh url)"
    ;;
  stop)
    if running; then as_pg "$(bindir)/pg_ctl" -D "$data" -m fast -w stop >/dev/null; say "stopped"; else say "not running"; fi
    ;;
  status)
    if running; then say "running: $shown"; else say "not running"; exit 3; fi
    ;;
  url)
    url
    ;;
  env)
    echo "export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN='$(url)'"
    ;;
  *)
    echo "usage: bash infra/postgres.sh start|stop|status|url|env" >&2
    exit 64
    ;;
esac
