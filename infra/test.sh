#!/usr/bin/env bash
# Set everything up (idempotent) and run the checks and tests. Two tiers:
#
#   bash infra/test.sh            the full suite (what CI runs): lint, types, then four pytest runs
#                                 side by side, each with its own log:
#                                   spark-unit    Spark venv: unit, property, oracle and contract tests,
#                                                 doctests, the Spark twins, the batch stages, the
#                                                 README's example, the aggregate DAGs' and
#                                                 maintenance's idempotence
#                                   spark-stream  Spark venv: the stream stages over arrival intervals
#                                                 (join, aggregates with their repair, top-k, θ backfill),
#                                                 the concurrent-writer tests, the main job (with the
#                                                 production Spark settings) and a crash trial
#                                                 of every stage
#                                   airflow       Airflow venv: DAG integrity and Params, the plugin,
#                                                 `airflow dags test` runs, the scale-out stack (Spark
#                                                 cluster, MinIO, PostgreSQL)
#                                   scheduler     Airflow venv: Airflow standalone (scheduler, DAG runs
#                                                 and a backfill) and the browser test, then a live
#                                                 session (infra/live.sh) with the gated consumer
#   bash infra/test.sh --fast     the inner loop, a few minutes: lint, types, and every test that starts
#                                 no Spark session and no service (core operators and their contract,
#                                 sources, CLI parsing, job declarations, DAG integrity and Params)
#
# The services (MinIO, the Spark cluster, PostgreSQL, Airflow) are started by the tests themselves
# with the infra scripts. Extra arguments go to every pytest run. The full run prints each run's
# slowest tests. Exits non-zero if anything fails, including "no tests collected" (exit code 5).
#
# Every JVM the tests start (Spark drivers, spark-submit, the cluster) runs with the client JIT and
# the serial collector: tests are many short JVMs on tiny data, where the optimising compiler's and
# the parallel collector's threads cost a third of the CPU and pay back nothing. The exception is
# each pytest run's session-wide Spark driver, which lives for the whole run: it gets the
# optimising compiler back (tests/sparkconf.py). Results do not depend on either; production and
# benchmarks keep the JVM's defaults.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tier=full
if [ "${1:-}" = "--fast" ]; then
  tier=fast
  shift
fi
bash "$here/setup.sh" || exit 1
if [ "$tier" = full ]; then
  # the scale-out tests start MinIO: build it now (first time ~8 min, then cached) rather than in a test
  bash "$here/minio.sh" install || exit 1
  bash "$here/kafka.sh" install || exit 1   # the Kafka tests' broker (Maven jars, cached)
fi
source "$here/env.sh"
cd "$OOO_REPO" || exit 1
# The JVM options of the header, plus Spark's classes from a class-data-sharing archive
# (infra/jvm-archive.sh: built once per machine, then about 9 CPU-seconds less per JVM start).
JAVA_TOOL_OPTIONS="$(bash "$here/jvm-archive.sh" "${JAVA_TOOL_OPTIONS:--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}")"
export JAVA_TOOL_OPTIONS
t0=$SECONDS
reports="$OOO_LOCAL/test-reports"
mkdir -p "$reports"
rm -rf "$reports"/*.xml "$reports"/*.log "$reports"/tmp-*
status=0
step() { echo; echo "[test] $*"; }

step "lint (ruff check + ruff format --check)"
"$OOO_SPARK_VENV/bin/ruff" check . && "$OOO_SPARK_VENV/bin/ruff" format --check . || status=1

step "types (mypy --strict on pipelines/outoforder)"
"$OOO_SPARK_VENV/bin/mypy" || status=1

spark_py="$OOO_SPARK_VENV/bin/python"
airflow_py="$OOO_AIRFLOW_VENV/bin/python"
# the modules whose doctests run (pure ones: the rest need a Spark session to import)
doctests=(pipelines/outoforder/__init__.py pipelines/outoforder/core pipelines/outoforder/sources
  pipelines/outoforder/config pipelines/outoforder/io/objectstore.py pipelines/outoforder/io/conflicts.py
  pipelines/outoforder/io/files.py pipelines/outoforder/quality/docs_assets.py
  pipelines/outoforder/stages/ingest/produce.py pipelines/outoforder/io/figures.py
  pipelines/outoforder/stages/spec.py
  pipelines/outoforder/checks pipelines/outoforder/stages/registry.py pipelines/outoforder/stages/options.py
  pipelines/outoforder/stages/context.py pipelines/outoforder/stages/state.py
  pipelines/outoforder/stages/join/spec.py pipelines/outoforder/stages/aggregate/spec.py
  pipelines/outoforder/stages/topk/spec.py pipelines/outoforder/stages/theta/spec.py docs/operators.md)
common=(-p no:cacheprovider --doctest-glob='*.md')

run_pytest() {  # name python args...: one pytest run, its output in $reports/name.log
  local name=$1 py=$2
  shift 2
  # OOO_TEST_RUN names the run in every process it starts (servers, Airflow, its tasks): what
  # each run costs the machine can be read off /proc
  OOO_TEST_RUN="$name" PATH="$(dirname "$py"):$PATH" "$py" -m pytest "${common[@]}" --basetemp="$reports/tmp-$name" \
    --junitxml="$reports/$name.xml" "$@" >"$reports/$name.log" 2>&1
}

if [ "$tier" = fast ]; then
  step "fast tier: Spark venv, no Spark session (core, sources, contract, CLI, job declarations)"
  run_pytest fast-spark "$spark_py" tests "${doctests[@]}" --doctest-modules --ignore=tests/airflow \
    -m "not spark and not integration" "$@"
  rc=$?; cat "$reports/fast-spark.log"; [ $rc -eq 0 ] || { echo "[test] fast-spark pytest exited $rc"; status=1; }
  step "fast tier: Airflow venv, DAG integrity and Params"
  run_pytest fast-airflow "$airflow_py" tests/airflow -m "not integration" "$@"
  rc=$?; cat "$reports/fast-airflow.log"; [ $rc -eq 0 ] || { echo "[test] fast-airflow pytest exited $rc"; status=1; }
else
  step "four pytest runs side by side (logs in $reports/*.log; each is printed when it ends)"
  # The Spark venv's tests in two runs of about the same CPU, so that they end at about the same
  # time: the stream stages' files, the main job's and the crash trials in one, the rest in the
  # other. Two, not more: each run's session-wide Spark driver pays its own JVM start and JIT
  # warm-up, and the machine is busy with two anyway.
  stream=(tests/spark/test_aggregate_stream.py tests/spark/test_join_stream.py tests/spark/test_topk_stream.py
    tests/spark/test_theta_backfill.py tests/spark/test_concurrent_writers.py tests/spark/test_kafka_ingest.py
    tests/spark/test_main_job.py tests/spark/test_crash_recovery.py)
  declare -A pids
  run_pytest spark-unit "$spark_py" tests "${doctests[@]}" --doctest-modules --ignore=tests/airflow \
    "${stream[@]/#/--ignore=}" --durations=15 "$@" &
  pids[spark-unit]=$!
  run_pytest spark-stream "$spark_py" "${stream[@]}" --durations=15 "$@" &
  pids[spark-stream]=$!
  scheduler=(tests/airflow/test_standalone.py tests/airflow/test_live_session.py)
  run_pytest airflow "$airflow_py" tests/airflow "${scheduler[@]/#/--ignore=}" --durations=15 "$@" &
  pids[airflow]=$!
  run_pytest scheduler "$airflow_py" "${scheduler[@]}" --durations=15 "$@" &
  pids[scheduler]=$!
  remaining=(spark-unit spark-stream airflow scheduler)
  while [ ${#remaining[@]} -gt 0 ]; do
    wait -n "${pids[@]}" 2>/dev/null
    still=()
    for name in "${remaining[@]}"; do
      if kill -0 "${pids[$name]}" 2>/dev/null; then
        still+=("$name")
        continue
      fi
      wait "${pids[$name]}"; rc=$?
      step "$name: exit $rc after $((SECONDS - t0)) s"
      cat "$reports/$name.log"
      [ $rc -eq 0 ] || { echo "[test] $name pytest exited $rc"; status=1; }
    done
    remaining=("${still[@]}")
  done
fi

# One closing line over all runs (each pytest run prints its own as well).
"$spark_py" - "$reports" <<'PY'
import sys, pathlib, xml.etree.ElementTree as ET
tot = dict(tests=0, failures=0, errors=0, skipped=0)
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for s in ET.parse(f).getroot().iter("testsuite"):
        for k in tot:
            tot[k] += int(s.get(k, 0))
    # Name every failure here too: CI shows only the tail of the output.
    for case in ET.parse(f).getroot().iter("testcase"):
        for bad in (*case.iter("failure"), *case.iter("error")):
            why = "".join((bad.get("message") or "").splitlines()[:1])[:200]
            print(f"[test] FAILED ({f.stem}) {case.get('classname')}::{case.get('name')}: {why}")
passed = tot["tests"] - tot["failures"] - tot["errors"] - tot["skipped"]
print(f"\n[test] all suites: {passed} passed, {tot['failures'] + tot['errors']} failed, {tot['skipped']} skipped")
sys.exit(0 if tot["tests"] > 0 else 5)
PY
[ $? -eq 0 ] || status=1
echo "[test] $tier tier finished in $((SECONDS - t0)) s (after setup): $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
