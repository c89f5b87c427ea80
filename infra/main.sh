#!/usr/bin/env bash
# Set everything up (idempotent) and run the main job on the embedded default through Airflow:
# the DAG `pipeline` (ingest -> stream join -> aggregates and repair -> θ-join -> top-k -> quality
# report), each step a Spark stage over Delta tables under .local/lake, with the real datasets from
# ../shared/data, as a client of the shared Spark application (the Spark Connect server of
# infra/spark-connect.sh on local[2]: started here if it is not running, and stopped again at the
# end if it was started here). Ends with the report's location and the headline tables.
#
#   bash infra/main.sh                   the whole pipeline through Airflow (`airflow dags test pipeline`)
#   bash infra/main.sh --preset qjoin_d1 another disorder preset for the replay
#   bash infra/main.sh --direct          the same steps in one process, without Airflow (faster)
#
# The full Airflow output goes to .local/main-job.log; the terminal shows each step's progress.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
source "$here/env.sh"
cd "$OOO_REPO"
py="$OOO_SPARK_VENV/bin/python"

preset=""
direct=0
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset="$2"; shift 2 ;;
    --preset=*) preset="${1#--preset=}"; shift ;;
    --direct) direct=1; shift ;;
    *) echo "usage: bash infra/main.sh [--preset NAME] [--direct]" >&2; exit 64 ;;
  esac
done

if [ "$direct" -eq 1 ]; then
  "$py" -m outoforder.stages demo ${preset:+--preset "$preset"}
  exec "$py" -m outoforder.stages report --headline
fi

eval "$(bash "$here/airflow.sh" env)"
started=0
if ! bash "$here/spark-connect.sh" status >/dev/null 2>&1; then
  bash "$here/spark-connect.sh" start
  started=1
fi
trap '[ "$started" -eq 1 ] && bash "$here/spark-connect.sh" stop >/dev/null' EXIT
eval "$(bash "$here/spark-connect.sh" env)"   # the closing report is a client too
mkdir -p "$AIRFLOW_HOME"
log="$OOO_LOCAL/main-job.log"
t0=$SECONDS
echo "[main] Airflow home $AIRFLOW_HOME (SQLite); full log in $log"
airflow db migrate >"$AIRFLOW_HOME/migrate.log" 2>&1 || { tail -20 "$AIRFLOW_HOME/migrate.log" >&2; exit 1; }
conf="{\"preset\": \"$preset\"}"
echo "[main] airflow dags test pipeline -c '$conf'"
# progress: the stages' own lines and Airflow's task transitions; everything else only in the log
set +e
airflow dags test pipeline -c "$conf" 2>&1 | tee "$log" \
  | sed -unE -e 's/.*(\[(demo|ingest|inject|stats|quality|join[a-z-]*|validate-[a-z]+|aggregate-[a-z]+|theta|topk-stream|report)\].*)/\1/p' \
            -e 's/.*\[DAG TEST\] starting task_id=([a-z_]+).*/[main] task \1 started/p' \
            -e 's/.*\[DAG TEST\] end task task_id=([a-z_]+).*/[main] task \1 ended/p' \
  | sed -uE 's/", *"(run_id|dag_id|task_id|logger|map_index|ti_id|try_number|filename|lineno)".*$//; s/ \[airflow[^]]*\].*$//'
set -e
# Airflow marks the run successful when its last task does, and the report runs whatever came
# before it (all_done): a task that failed for good must fail the main job all the same
if ! grep -q 'state=success' "$log" || grep -q 'new_state=failed' "$log"; then
  echo "[main] the pipeline did not succeed: see $log (the failed task's lines are there)" >&2
  exit 1
fi
echo "[main] pipeline done through Airflow in $((SECONDS - t0)) s"
"$py" -m outoforder.stages report --headline 2>>"$log"
