# Sourced by the infra scripts: where the venvs, jars and local state live. No side effects.
# Everything that is expensive to build lives under OOO_HOME (a cache shared by clones on this
# machine, keyed by the hash of what defines it); per-clone state lives under the clone's .local/.
OOO_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OOO_REPO
export OOO_HOME="${OOO_HOME:-$HOME/.cache/outoforder}"
OOO_PYTHON="${OOO_PYTHON:-python3.11}"

_ooo_hash() { cat "$@" | sha256sum | cut -c1-12; }
# Credentials files (MinIO's, PostgreSQL's, docker-compose's): KEY=value lines, owner-only (0600),
# generated once. `_ooo_make_secrets FILE NAME... NAME=prefix...` writes a random secret for each
# NAME, and prefix-<8 hex digits> (a user name) for each NAME=prefix; an existing FILE is kept.
_ooo_make_secrets() {
  local file=$1; shift
  [ -s "$file" ] && return 0
  mkdir -p "$(dirname "$file")"
  (umask 077; "$OOO_PYTHON" -c 'import secrets, sys
for spec in sys.argv[1:]:
    name, _, prefix = spec.partition("=")
    print(f"{name}={prefix}-{secrets.token_hex(4)}" if prefix else f"{name}={secrets.token_urlsafe(30)}")
' "$@" >"$file.tmp") && mv "$file.tmp" "$file"
}
_ooo_secret() { sed -n "s/^$2=//p" "$1"; }  # FILE KEY: one value of a credentials file
_ooo_pyver="$("$OOO_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)"

export OOO_SPARK_VENV="$OOO_HOME/venvs/spark-py${_ooo_pyver}-$(_ooo_hash "$OOO_REPO/infra/requirements/bootstrap.txt" "$OOO_REPO/infra/requirements/spark.lock")"
export OOO_AIRFLOW_VENV="$OOO_HOME/venvs/airflow-py${_ooo_pyver}-$(_ooo_hash "$OOO_REPO/infra/requirements/bootstrap.txt" "$OOO_REPO/infra/requirements/airflow.lock")"
export OOO_SPARK_JARS_DIR="$OOO_HOME/jars/delta-$(_ooo_hash "$OOO_REPO/infra/maven/pom.xml")"

# Spark jobs started by Airflow (spark-submit) must run the Spark venv's Python.
export PYSPARK_PYTHON="$OOO_SPARK_VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$OOO_SPARK_VENV/bin/python"

export OOO_LOCAL="${OOO_LOCAL:-$OOO_REPO/.local}"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$OOO_LOCAL/airflow}"
# hadoop-aws + the AWS SDK bundle, for a lake on s3a:// (fetched by setup.sh, ~650 MB, never committed),
# and the project's log store for Delta on S3 (compiled by setup.sh from infra/jvm/logstore)
export OOO_S3A_JARS_DIR="$OOO_HOME/jars/s3a-$(_ooo_hash "$OOO_REPO/infra/maven/s3a/pom.xml" "$OOO_REPO"/infra/jvm/logstore/*.java)"
