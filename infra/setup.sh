#!/usr/bin/env bash
# Idempotent set-up of everything the project needs on this machine:
#   1. system tools (Python 3.11, a JDK 17 with javac, Maven, chromium and its driver for the browser test) --
#      installed with apt-get only if missing;
#   2. the Spark venv and the Airflow venv from the locked requirements (cached under OOO_HOME,
#      keyed by the lock file's hash, so a warm machine skips straight past them);
#   3. Delta's JVM jars from infra/maven/pom.xml, and s3a's (hadoop-aws, AWS SDK) from
#      infra/maven/s3a/pom.xml, into a jar cache (checked against Spark's own jars);
#   4. the project itself, editable, into both venvs (Airflow's copy without dependencies: DAG files
#      only import the stdlib-only config module).
# Prints one line per step; exits non-zero with the reason if a step fails.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
t0=$SECONDS
say() { echo "[setup] $*"; }

java_major() { java -version 2>&1 | sed -nE '1s/.*version "([0-9]+).*/\1/p'; }
need_apt=()
command -v "$OOO_PYTHON" >/dev/null || need_apt+=(python3.11)
"$OOO_PYTHON" -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3.11-venv)
# javac builds the project's one JVM class, Delta's log store for S3 (infra/jvm/)
if ! command -v javac >/dev/null || [ "$(java_major)" -lt 17 ] 2>/dev/null; then
  need_apt+=(openjdk-17-jdk-headless)
fi
command -v mvn >/dev/null || need_apt+=(maven)
# the browser test drives Debian's chromium through its chromedriver (no browser downloads)
{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || need_apt+=(chromium chromium-driver)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing system packages: ${need_apt[*]}"
  command -v apt-get >/dev/null || { echo "[setup] missing ${need_apt[*]} and no apt-get: install them first" >&2; exit 1; }
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need_apt[@]}" >/dev/null
  source "$(dirname "${BASH_SOURCE[0]}")/env.sh"   # the Python version is part of the venv keys
fi

# One set-up at a time per OOO_HOME: two runs (say test.sh and main.sh) must not build the same
# venv at once.
mkdir -p "$OOO_HOME"
exec 9>"$OOO_HOME/.setup.lock"
flock 9

make_venv() {  # name dir lockfile
  local name=$1 dir=$2 lock=$3
  if [ -f "$dir/.complete" ]; then
    say "$name venv ready ($dir)"
    return
  fi
  say "$name venv: installing $(grep -vc '^#' "$lock") locked packages into $dir (first time only, ~2 min)"
  rm -rf "$dir"
  "$OOO_PYTHON" -m venv "$dir"
  "$dir/bin/pip" install -q -r "$OOO_REPO/infra/requirements/bootstrap.txt"
  "$dir/bin/pip" install -q -r "$lock"
  touch "$dir/.complete"
}

install_project() {  # name dir extra-pip-args
  local name=$1 dir=$2; shift 2
  # An editable install points at one clone; re-point it only when this clone is not the one.
  if [ "$(cat "$dir/.project-path" 2>/dev/null)" != "$OOO_REPO" ]; then
    "$dir/bin/pip" install -q --no-build-isolation "$@" -e "$OOO_REPO" >/dev/null
    echo "$OOO_REPO" > "$dir/.project-path"
    say "$name venv: project installed (editable) from $OOO_REPO"
  fi
}

make_venv spark "$OOO_SPARK_VENV" "$OOO_REPO/infra/requirements/spark.lock"
install_project spark "$OOO_SPARK_VENV" --no-deps
make_venv airflow "$OOO_AIRFLOW_VENV" "$OOO_REPO/infra/requirements/airflow.lock"
install_project airflow "$OOO_AIRFLOW_VENV" --no-deps

spark_jars="$("$OOO_SPARK_VENV/bin/python" -c 'import pyspark, os; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
fetch_jars() {  # what pom dir
  local what=$1 pom=$2 dir=$3
  if [ ! -f "$dir/.complete" ]; then
    say "fetching $what jars with Maven into $dir"
    rm -rf "$dir"
    mvn -q -B -Dmaven.repo.local="$OOO_HOME/m2" -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$dir"
    # artifact name = file name without the trailing -<version>.jar
    dups="$(comm -12 \
      <(ls "$spark_jars" | sed -E 's/-[0-9][^-]*\.jar$//' | sort -u) \
      <(ls "$dir" | sed -E 's/-[0-9][^-]*\.jar$//' | sort -u))"
    if [ -n "$dups" ]; then
      echo "[setup] these fetched jars duplicate jars Spark ships; exclude them in $pom:" >&2
      echo "$dups" >&2
      exit 1
    fi
    touch "$dir/.complete"
  fi
  say "$what jars ready: $(ls "$dir"/*.jar | wc -l) jars in $dir"
}
fetch_jars Delta "$OOO_REPO/infra/maven/pom.xml" "$OOO_SPARK_JARS_DIR"
# for a lake on s3a:// (hadoop-aws + the AWS SDK bundle, ~650 MB: cached, never committed)
fetch_jars s3a "$OOO_REPO/infra/maven/s3a/pom.xml" "$OOO_S3A_JARS_DIR"
# Delta's log store for several writing processes on S3 (conditional PUTs), compiled against the
# Delta and Hadoop jars in use; it lives beside hadoop-aws (its folder's key covers the source)
logstore_jar="$OOO_S3A_JARS_DIR/outoforder-logstore.jar"
if [ ! -f "$logstore_jar" ]; then
  say "compiling Delta's S3 log store (infra/jvm/logstore) into $logstore_jar"
  classes="$(mktemp -d)"
  javac --release 17 -nowarn -d "$classes" \
    -cp "$(ls "$OOO_SPARK_JARS_DIR"/delta-storage-*.jar):$(ls "$spark_jars"/hadoop-client-api-*.jar)" \
    "$OOO_REPO"/infra/jvm/logstore/*.java
  jar cf "$logstore_jar.tmp" -C "$classes" .
  mv "$logstore_jar.tmp" "$logstore_jar"
  rm -rf "$classes"
fi
# the scripts and styles of the Data Docs pages, pinned (infra/datadocs/assets.toml), served by
# the site itself instead of public CDNs
"$OOO_SPARK_VENV/bin/python" -m outoforder.quality.docs_assets fetch
mkdir -p "$OOO_LOCAL"
say "done in $((SECONDS - t0)) s"
