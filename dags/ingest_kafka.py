"""### Ingest a Kafka topic, every minute

1. **ingest** (`python -m outoforder.stages ingest-kafka --source <source>`) reads, from every
   partition of the source's topic, the offsets between where the previous run stopped and the end
   of the log, parses each record with the source's declaration (`[sources.<name>]` with a `topic`,
   docs/sources.md), and commits bronze, quarantine and the ingest log together with the offsets.
   The arrival order is (log-append time, partition, offset). Offsets that expired before they
   were read, or a topic deleted and created again, fail the task naming the partitions and offsets.
2. **validate_bronze** runs the bronze suites over what this run ingested.

The stream DAGs (`join_stream`, `aggregate_stream`, `topk_stream`) on the same source never run
ahead of this one: an interval that the Kafka ingest does not cover yet fails and is retried.

Thin: one out-of-process Spark stage and the bronze checks. The offsets live in Delta
(``bronze/kafka_offsets``), committed with the data, so a retry or a crashed run neither loses nor
duplicates a record.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from _spark_stage import default_args, every, params
from airflow.sdk import dag
from outoforder_airflow.operators import STREAM_INTERVAL, StageOperator, close_run

from outoforder.stages import spec


@dag(
    dag_id="ingest_kafka",
    schedule=every(STREAM_INTERVAL),  # on the minute, as the stream DAGs
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["outoforder", "bronze", "ingest", "kafka"],
    doc_md=__doc__,
    default_args=default_args(retry_delay=timedelta(seconds=20)),
    params=params(
        {
            "source": ("yard", {"type": "string", "description": "a source declared with a topic"}),
            **{s.name: (s.default, s.json_schema()) for s in (spec.ON_VIOLATION, spec.CONFIG)},
        },
        "ingest_kafka",
    ),
)
def ingest_kafka() -> None:
    """Ingest what arrived on the topic, then check bronze."""
    # the stream DAGs' passes of the same minute wait for this commit: when executor slots are
    # short, it goes first (by default a task's weight is its downstream count, and theirs is larger)
    ingest = StageOperator(
        task_id="ingest",
        stage="ingest-kafka",
        stage_args=["--source", "{{ params.source }}"],
        priority_weight=100,
        weight_rule="absolute",
    )
    # what this run ingested (its batches finish after the run started): a cost that follows the batch
    validate_bronze = StageOperator(
        task_id="validate_bronze",
        stage="validate-bronze",
        stage_args=["--since", "{{ dag_run.start_date }}"],
        validation=True,
    )
    ingest >> validate_bronze
    close_run()


ingest_kafka()
