#!/usr/bin/env bash
# Set everything up (idempotent) and run every check: lint, types, architecture contracts, the
# Spark-venv test suite (unit, property, oracle, Spark/Delta, GX, the main job on a Spark cluster
# over MinIO) and the Airflow-venv suite (DAG integrity, `airflow dags test` on SQLite and on
# PostgreSQL, the standalone scheduler and the browser). The services (MinIO, the Spark cluster,
# PostgreSQL, Airflow) are started by the tests themselves with the infra scripts. Extra arguments
# go to both pytest runs.
# Exits non-zero if anything fails, including "no tests collected" (pytest's exit code 5).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh" || exit 1
# the scale-out tests start MinIO: build it now (first time ~8 min, then cached) rather than in a test
bash "$here/minio.sh" install || exit 1
source "$here/env.sh"
cd "$OOO_REPO" || exit 1
t0=$SECONDS
reports="$OOO_LOCAL/test-reports"
mkdir -p "$reports"
rm -f "$reports"/*.xml
status=0
step() { echo; echo "[test] $*"; }

step "lint (ruff check + ruff format --check)"
"$OOO_SPARK_VENV/bin/ruff" check . && "$OOO_SPARK_VENV/bin/ruff" format --check . || status=1

step "types (mypy --strict on pipelines/outoforder)"
"$OOO_SPARK_VENV/bin/mypy" || status=1

step "Spark venv: pytest tests/ (without tests/airflow) + doctests"
"$OOO_SPARK_VENV/bin/python" -m pytest tests pipelines/outoforder/core pipelines/outoforder/sources \
  pipelines/outoforder/config.py pipelines/outoforder/io/objectstore.py pipelines/outoforder/io/conflicts.py \
  pipelines/outoforder/stages/intervals.py \
  --doctest-modules --ignore=tests/airflow \
  -p no:cacheprovider --junitxml="$reports/spark.xml" "$@"
rc=$?; [ $rc -eq 0 ] || { echo "[test] Spark-venv pytest exited $rc"; status=1; }

step "Airflow venv: pytest tests/airflow"
PATH="$OOO_AIRFLOW_VENV/bin:$PATH" "$OOO_AIRFLOW_VENV/bin/python" -m pytest tests/airflow \
  -p no:cacheprovider --junitxml="$reports/airflow.xml" "$@"
rc=$?; [ $rc -eq 0 ] || { echo "[test] Airflow-venv pytest exited $rc"; status=1; }

# One closing line over both runs (each pytest run above prints its own as well).
"$OOO_SPARK_VENV/bin/python" - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
tot = dict(tests=0, failures=0, errors=0, skipped=0)
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for s in ET.parse(f).getroot().iter("testsuite"):
        for k in tot:
            tot[k] += int(s.get(k, 0))
passed = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
print(f"\n[test] all suites: {passed} passed, {tot['failures'] + tot['errors']} failed, {tot['skipped']} skipped")
sys.exit(0 if tot["tests"] > 0 else 5)
PY
[ $? -eq 0 ] || status=1
echo "[test] finished in $((SECONDS - t0)) s (after setup): $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
