"""Schemas and locations of every Delta table, in one place.

``bronze`` is the system of record: every tuple ever accepted, append-only, partitioned by source.
``quarantine`` holds every rejected line with its reason; ``ingest_log`` one row per ingested file.
For every file: rows read = rows in bronze + rows in quarantine (checked by the tests and GX).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)


def _s(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in fields])  # type: ignore[arg-type]


BRONZE_SCHEMA = _s(
    ("source", StringType(), False),  # logical origin, e.g. "ooo/d-1"; one arrival order each
    ("stream", StringType(), False),  # operator input, e.g. ball / team_a / devices / taxi
    ("key", StringType(), False),  # entity: sensor id, device id, medallion
    ("event_ts", LongType(), False),  # event time, µs since the epoch (UTC)
    ("arrival_seq", LongType(), False),  # global, strictly increasing in receive order
    ("arrival_ts", LongType(), True),  # receive time (µs) when the source has one
    ("x", DoubleType(), True),
    ("y", DoubleType(), True),
    ("z", DoubleType(), True),
    ("value", DoubleType(), True),  # the primary measure (speed, content length, fare)
    ("attrs", MapType(StringType(), StringType()), True),  # every other field, verbatim
    ("row_hash", LongType(), False),  # 64-bit digest of the raw line (duplicate detection)
    ("ingest_id", StringType(), False),
    ("source_file", StringType(), False),
    ("line_no", LongType(), False),
)

QUARANTINE_SCHEMA = _s(
    ("source", StringType(), False),
    ("ingest_id", StringType(), False),
    ("source_file", StringType(), False),
    ("line_no", LongType(), False),
    ("raw_line", StringType(), True),
    ("reason", StringType(), False),
    ("detail", StringType(), True),
)

INGEST_LOG_SCHEMA = _s(
    ("ingest_id", StringType(), False),  # source + file content hash: the idempotence key
    ("status", StringType(), False),  # "started" (claims the ordinal) or "done" (with the counts)
    ("file_ordinal", LongType(), False),  # arrival_seq = file_ordinal * SEQ_PER_FILE + line_no (files)
    ("source", StringType(), False),
    ("source_file", StringType(), False),
    ("file_sha256", StringType(), False),
    ("file_bytes", LongType(), False),
    ("reader", StringType(), False),
    ("lines", LongType(), False),
    ("header_lines", LongType(), False),
    ("blank_lines", LongType(), False),
    ("rows_read", LongType(), False),
    ("rows_accepted", LongType(), False),
    ("rows_quarantined", LongType(), False),
    ("arrival_seq_first", LongType(), True),
    ("arrival_seq_last", LongType(), True),
    ("ingested_at_us", LongType(), False),
)


# The Kafka ingest (stages/ingest/kafka.py): one row per (source, batch, partition), claimed before
# the batch is read (and copied with a newer listed_at_us by runs that find nothing new). A batch's
# bronze and quarantine rows are appended in commits tagged with its ingest_id, and its ingest-log
# row says done; the next batch starts where the newest one ends.
KAFKA_OFFSETS_SCHEMA = _s(
    ("source", StringType(), False),
    ("batch", LongType(), False),
    ("topic", StringType(), False),
    ("topic_id", StringType(), False),  # changes when a topic is deleted and created again
    ("partition", LongType(), False),
    ("start_offset", LongType(), False),  # [start, end): the records this batch reads
    ("end_offset", LongType(), False),
    # every record appended before this is in this batch or earlier (moved on by runs finding nothing new)
    ("listed_at_us", LongType(), False),
    ("ingest_id", StringType(), False),
    # arrival_seq = file_ordinal * SEQ_PER_FILE + first_rank + the record's rank in the batch
    ("file_ordinal", LongType(), True),
    ("first_rank", LongType(), True),
    ("bronze_after", LongType(), True),  # bronze's newest version at the claim: a resumed run looks after it
)


# A file's tuples get arrival_seq = file_ordinal * SEQ_PER_FILE + line number: strictly increasing
# in receive order, fixed before any row is written (so a resumed ingest re-derives the same
# numbers), and readable (file 3, line 1234 -> 30_000_001_234).
SEQ_PER_FILE = 10_000_000_000


# Columns that record when, where or how fast a row was written (wall clock, local paths, timings)
# rather than what it says: content checksums (delta.content_digest) leave them out, so two runs of
# the same work on different machines, storage or Spark masters compare equal.
VOLATILE_COLUMNS = frozenset(
    {
        "source_file",
        "ingested_at_us",
        "listed_at_us",
        "written_at_us",
        "computed_at_us",
        "validated_at_us",
        "seconds",
        "docs_page",
        # a stream stage's bookkeeping of its runs (how many passes, its outputs' commit versions):
        # the same data reached in more or fewer runs, or after a killed run's rows were cleared
        "passes",
        "outputs",
    }
)


@dataclass(frozen=True)
class Table:
    """A Delta table: name, schema, partition columns and its path under the lake root."""

    name: str
    schema: StructType
    partition_by: tuple[str, ...] = ()

    def path(self, lake_root: Path | str) -> str:
        """Location of the table under ``lake_root``."""
        root = str(lake_root)
        # a URI must keep its "//" (Path would fold s3a://b/p into s3a:/b/p)
        return f"{root.rstrip('/')}/{self.name}" if "://" in root else str(Path(root) / self.name)


JOIN_METRICS_SCHEMA = _s(
    ("source", StringType(), False),
    ("method", StringType(), False),
    ("period", LongType(), False),
    ("start_us", LongType(), False),
    ("true_pairs", LongType(), False),
    ("produced_pairs", LongType(), False),
    ("recall", DoubleType(), False),
    ("met", BooleanType(), False),
    ("q_user", DoubleType(), False),
    # memory and logical latency in the period (null where the stage does not measure them)
    ("buffered_mean_r", DoubleType(), True),
    ("buffered_mean_s", DoubleType(), True),
    ("buffered_max_r", DoubleType(), True),
    ("buffered_max_s", DoubleType(), True),
    ("latency_mean_us", DoubleType(), True),
    ("latency_p95_us", DoubleType(), True),
)

# The stream join (stages/join/stream.py). ``job`` names one query + target (a digest of them),
# so several joins of one source live side by side. A pass writes its pairs, its decisions and its
# state: every column but ``written_at_us`` / ``computed_at_us`` is the same however the scheduler
# cut the stream into passes.
JOIN_RESULTS_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("r_seq", LongType(), False),  # arrival_seq of the R tuple
    ("s_seq", LongType(), False),
    ("r_ts", LongType(), False),
    ("s_ts", LongType(), False),
    ("emitted_at_seq", LongType(), False),  # the arrival that produced the pair
    ("emitted_at_us", LongType(), True),  # its arrival time
    ("produced_by", StringType(), False),  # "stream" or "repair"
    ("d_r_us", LongType(), False),  # the retention in force
    ("d_s_us", LongType(), False),
    ("params_version", LongType(), False),  # join_params.valid_from_seq of those, -1 = initial
    ("written_at_us", LongType(), False),
)
# One table per job's state, its snapshots keyed by as_of_us (the arrival time up to which the
# pass went): a "state" row (the operator's scalars and the job's counters) and a "row" per kept
# arrival (the buffered tuples and the history its decisions look at).
JOIN_STATE_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("as_of_us", LongType(), False),  # the state after every arrival before this arrival time
    ("kind", StringType(), False),  # "state" or "row"
    # state: where the job started, what it has processed, the operator's scalars, its outputs' versions
    ("first_us", LongType(), True),
    ("last_seq", LongType(), True),
    ("arrivals", LongType(), True),
    ("pairs", LongType(), True),
    ("passes", LongType(), True),
    ("scalars", StringType(), True),
    ("outputs", StringType(), True),
    ("written_at_us", LongType(), True),
    # row: a kept arrival (outoforder.core.joins.adaptive.ROW_COLUMNS)
    ("seq", LongType(), True),
    ("side", LongType(), True),
    ("ts", LongType(), True),
    ("x", DoubleType(), True),
    ("y", DoubleType(), True),
    ("key", LongType(), True),
    ("t", LongType(), True),
    ("delay", LongType(), True),
    ("h_partner", LongType(), True),
)
JOIN_PARAMS_SCHEMA = _s(  # one row per decision of the controller, made inside the passes every L
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("valid_from_seq", LongType(), False),  # the arrival from which these are in force
    ("valid_from_us", LongType(), True),  # its arrival time
    ("progress_us", LongType(), False),  # T when decided
    ("estimator", StringType(), False),
    ("q_user", DoubleType(), False),
    ("q_l", DoubleType(), False),
    ("d_r_us", LongType(), False),
    ("d_s_us", LongType(), False),
    ("estimated_q", DoubleType(), False),
    ("stats_json", StringType(), False),  # the statistics the choice came from
    ("computed_at_us", LongType(), False),
)


# Sliding-window aggregates (stages/aggregate/stream.py, HPM). One row per window in the results:
# the stream writes version 1; a repair that changes the value writes version + 1 with the previous
# value and the late tuples that caused it; ``stream_value`` keeps what the stream emitted.
AGG_RESULTS_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("window_id", LongType(), False),
    ("window_start_us", LongType(), False),
    ("window_end_us", LongType(), False),
    ("value", DoubleType(), True),
    ("n_tuples", LongType(), False),  # tuples the value is computed from
    ("version", LongType(), False),
    ("final", BooleanType(), False),  # exact over every tuple stored when it was written
    ("produced_by", StringType(), False),  # "stream" | "repair"
    ("previous_value", DoubleType(), True),
    ("caused_by", ArrayType(LongType()), True),  # arrival_seq of the late tuples behind the change
    ("stream_value", DoubleType(), True),  # null: the stream never emitted this window
    ("emitted_at_seq", LongType(), True),
    ("slack_us", LongType(), True),  # K in force at the emission
    ("lambda_thr", DoubleType(), True),
    # stream: the arrival time of the arrival that emitted it; repair: the repair's id (its ledger end)
    ("written_by_us", LongType(), False),
    ("written_at_us", LongType(), False),
)
# What late data did, per pass: a "late" row per late membership (a tuple that arrived after a
# window it belongs to closed: what the repair makes exact) and an "observed" row per window whose
# coverage was observed (what its K needed and the controller's K after it: the trace). Every
# column but written_at_us is the same however the scheduler cut the stream into passes.
AGG_LEDGER_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("kind", StringType(), False),  # "late" or "observed"
    ("window_id", LongType(), False),
    ("seq", LongType(), False),  # late: the tuple; observed: the arrival at which it was observed
    ("arrival_us", LongType(), True),  # that arrival's time (a repair covers the ledger up to one)
    ("ts", LongType(), True),  # late: the tuple's event time
    ("n_rcv", LongType(), True),  # observed: its coverage n_rcv / (n_rcv + n_late)
    ("n_late", LongType(), True),
    ("lambda_thr", DoubleType(), True),
    ("needed_us", LongType(), True),  # the smallest constant K from which on it was within ε
    ("slack_after_us", LongType(), True),  # the controller's K once it had seen it
    ("written_at_us", LongType(), True),
)
AGG_REPAIRS_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("repair_id", LongType(), False),  # the ledger's arrivals before this arrival time (µs) are repaired
    ("trigger", StringType(), False),  # "gamma" | "forced"
    ("late_tuples", LongType(), False),
    ("late_span_us", LongType(), False),
    ("windows", LongType(), False),
    ("windows_changed", LongType(), False),
    ("windows_added", LongType(), False),
    ("rows_read", LongType(), False),
    ("affected_rows", LongType(), False),
    ("seconds", DoubleType(), False),
    ("written_at_us", LongType(), False),
    ("first_window", LongType(), True),  # the windows recomputed lie in [first_window, last_window]
    ("last_window", LongType(), True),  # (null in rows written before they were kept)
)
# One table per job's state, its snapshots keyed by as_of_us: a "state" row (the operator's scalars,
# the job's counters), an "open" row per value of a window still open (in the order received, ``ord``)
# and a "watch" row per closed window whose coverage is not observed yet.
AGG_STATE_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("as_of_us", LongType(), False),
    ("kind", StringType(), False),  # "state", "open" or "watch"
    ("first_us", LongType(), True),
    ("last_seq", LongType(), True),
    ("arrivals", LongType(), True),
    ("emitted", LongType(), True),
    ("late", LongType(), True),
    ("passes", LongType(), True),
    ("scalars", StringType(), True),  # the HPM operator's snapshot without its windows, the policy's
    ("outputs", StringType(), True),
    ("written_at_us", LongType(), True),
    ("ord", LongType(), True),
    ("wid", LongType(), True),
    ("v", DoubleType(), True),  # open: a value received
    ("bucket", LongType(), True),  # open: its lateness bucket (core/windows/lateness.py)
    ("n_rcv", LongType(), True),  # watch: received, late so far, the coverage its target needs
    ("n_late", LongType(), True),
    ("lambda_thr", DoubleType(), True),
    ("profile", StringType(), True),  # watch: its lateness profile, [bucket, count, Σv, min, max] rows (JSON)
)

# θ-join backfills (stages/theta/backfill.py): per event-time window of a job, the rows of the
# multi-way θ-join (one arrival_seq and join value per stream, in stream order) and the run's counters.
THETA_RESULTS_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("window_start_us", LongType(), False),
    ("seqs", ArrayType(LongType()), False),
    ("vals", ArrayType(DoubleType()), False),
)
THETA_WINDOWS_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("window_start_us", LongType(), False),
    ("window_end_us", LongType(), False),
    ("method", StringType(), False),
    ("partitions", LongType(), False),
    ("rows", ArrayType(LongType()), False),  # per stream: rows in the window
    ("null_rows", ArrayType(LongType()), False),  # per stream: null/NaN join values, excluded
    ("output_rows", LongType(), False),
    ("rows_compared", LongType(), False),  # summed over the pairwise joins
    ("partition_pairs", LongType(), False),
    ("seconds", DoubleType(), False),
    ("written_at_us", LongType(), False),
    ("prefilter", StringType(), True),  # none, mcf or semi (equi-joins)
    ("kept_rows", ArrayType(LongType()), True),  # per stream: rows the pre-filter passed to the join
)

BRONZE = Table("bronze/arrivals", BRONZE_SCHEMA, ("source",))
QUARANTINE = Table("bronze/quarantine", QUARANTINE_SCHEMA, ("source",))
INGEST_LOG = Table("bronze/ingest_log", INGEST_LOG_SCHEMA)
KAFKA_OFFSETS = Table("bronze/kafka_offsets", KAFKA_OFFSETS_SCHEMA)
JOIN_METRICS = Table("gold/join_metrics", JOIN_METRICS_SCHEMA, ("source",))
JOIN_RESULTS = Table("gold/join_results", JOIN_RESULTS_SCHEMA, ("source",))
# The stream top-k (stages/topk/stream.py). The operator's state is one JSON snapshot per pass:
# small (k entries per open window), and the pure operator restores from it.
TOPK_STATE_SCHEMA = _s(  # the job's state snapshots, keyed by as_of_us: one "state" row each
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("as_of_us", LongType(), False),
    ("kind", StringType(), False),  # "state"
    ("first_us", LongType(), True),
    ("last_seq", LongType(), True),
    ("arrivals", LongType(), True),  # arrivals processed so far
    ("passes", LongType(), True),
    ("scalars", StringType(), True),  # the operator's snapshot, {"operator": ..., "cache": ...}
    ("outputs", StringType(), True),
    ("written_at_us", LongType(), True),
)
# Every emitted window, once, with its list: a row per member (rank 1 = highest score), or one row
# with a null rank when it was emitted empty. Every column but written_at_us is the same however
# the scheduler cut the stream into passes.
TOPK_RESULTS_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("window_id", LongType(), False),
    ("window_end_us", LongType(), False),
    ("size", LongType(), False),  # tuples in the emitted list (< k: fewer had arrived)
    ("emitted_at_seq", LongType(), True),  # the arrival that triggered it
    ("emitted_at_us", LongType(), True),  # its arrival time
    ("cache_us", DoubleType(), False),  # K in force at the emission
    ("rank", LongType(), True),
    ("seq", LongType(), True),  # bronze arrival_seq of the member
    ("ts", LongType(), True),
    ("score", DoubleType(), True),
    ("written_at_us", LongType(), False),
)
# What the pass recorded besides results: a "late" row per membership of a tuple that arrived after
# its window's emission; a "decision" row per cache-duration decision (the K_min trace); a "settled"
# row per window whose late tuples were awaited (how good its list was, what it needed).
TOPK_LEDGER_SCHEMA = _s(
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("kind", StringType(), False),
    ("window_id", LongType(), True),  # late, settled
    ("seq", LongType(), True),  # late: the tuple; decision: the arrival after which it was made
    ("arrival_us", LongType(), True),  # that arrival's time
    ("ts", LongType(), True),  # late
    ("score", DoubleType(), True),  # late
    ("progress_us", LongType(), True),  # decision
    ("k_min_us", DoubleType(), True),
    ("k_down_us", DoubleType(), True),
    ("k_up_us", DoubleType(), True),
    ("move", StringType(), True),
    ("accuracy", ArrayType(DoubleType()), True),  # mean hit rate per candidate duration
    # the lateness controller's statement (null for the seed's): the K the target needs, unbounded,
    # and the accuracy the user's bound allows on the evidence
    ("needed_us", DoubleType(), True),
    ("reachable", DoubleType(), True),
    ("window_end_us", LongType(), True),  # settled
    ("hit", DoubleType(), True),  # the emitted list's hit rate against the top-k known at settlement
    ("cache_us", DoubleType(), True),  # K at the emission
    ("exact_us", DoubleType(), True),  # the K at which the list would have been exact
    ("awaited_us", DoubleType(), True),  # late tuples were awaited this long after the end
    ("lateness", ArrayType(DoubleType()), True),  # per true top-k member: progress at arrival - end
    ("written_at_us", LongType(), True),
)

JOIN_STATE = Table("silver/join_state", JOIN_STATE_SCHEMA, ("source",))
JOIN_PARAMS = Table("silver/join_params", JOIN_PARAMS_SCHEMA, ("source",))
AGG_RESULTS = Table("gold/agg_results", AGG_RESULTS_SCHEMA, ("source",))
AGG_REPAIRS = Table("gold/agg_repairs", AGG_REPAIRS_SCHEMA, ("source",))
AGG_LEDGER = Table("silver/agg_ledger", AGG_LEDGER_SCHEMA, ("source",))
AGG_STATE = Table("silver/agg_state", AGG_STATE_SCHEMA, ("source",))
THETA_RESULTS = Table("gold/theta_results", THETA_RESULTS_SCHEMA, ("source",))
THETA_WINDOWS = Table("gold/theta_windows", THETA_WINDOWS_SCHEMA, ("source",))
TOPK_STATE = Table("silver/topk_state", TOPK_STATE_SCHEMA, ("source",))
TOPK_RESULTS = Table("gold/topk_results", TOPK_RESULTS_SCHEMA, ("source",))
TOPK_LEDGER = Table("silver/topk_ledger", TOPK_LEDGER_SCHEMA, ("source",))

QUALITY_MEASURES_SCHEMA = _s(  # what each validation judged, per period or window (the report's curves)
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("measure", StringType(), False),  # join_recall | agg_error | topk_hit_rate
    ("item", LongType(), False),  # period or window id
    ("start_us", LongType(), False),  # event time
    ("end_us", LongType(), False),
    ("value", DoubleType(), True),  # null: not measurable (e.g. a window never emitted)
    ("target", DoubleType(), False),
    ("met", BooleanType(), False),
    ("validated_at_us", LongType(), False),
)
QUALITY_RUNS_SCHEMA = _s(  # one row per suite per validation run
    ("checkpoint", StringType(), False),
    ("suite", StringType(), False),
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("run_name", StringType(), False),
    ("success", BooleanType(), False),
    ("checks_passed", LongType(), False),
    ("checks_total", LongType(), False),
    ("failed_checks", ArrayType(StringType()), False),
    ("on_violation", StringType(), False),
    ("docs_page", StringType(), True),  # the Data Docs page, relative to the docs folder
    ("validated_at_us", LongType(), False),
)
CHECK_POSITIONS_SCHEMA = _s(  # one row per check stage and job: where its runs have judged up to
    ("stage", StringType(), False),
    ("source", StringType(), False),
    ("job", StringType(), False),
    ("judged_until_us", LongType(), False),  # an arrival instant: what closed before it is judged
    ("run_name", StringType(), True),
    ("judged_at_us", LongType(), False),
)
QUALITY_MEASURES = Table("gold/quality_measures", QUALITY_MEASURES_SCHEMA, ("source",))
QUALITY_RUNS = Table("gold/quality_runs", QUALITY_RUNS_SCHEMA)
CHECK_POSITIONS = Table("gold/check_positions", CHECK_POSITIONS_SCHEMA)

ALL_TABLES = (
    BRONZE, QUARANTINE, INGEST_LOG, KAFKA_OFFSETS,
    JOIN_METRICS, JOIN_RESULTS, JOIN_STATE, JOIN_PARAMS,
    AGG_RESULTS, AGG_REPAIRS, AGG_LEDGER, AGG_STATE,
    THETA_RESULTS, THETA_WINDOWS,
    TOPK_STATE, TOPK_RESULTS, TOPK_LEDGER,
    QUALITY_MEASURES, QUALITY_RUNS, CHECK_POSITIONS,
)  # fmt: skip
