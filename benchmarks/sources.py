"""Sources: how fast each way in fills bronze with the same rows, and how late a Kafka record is joined.

Part 1, **throughput**, on local[2], each run in a process of its own (as a DAG task runs):

1. a synthetic replay of ``TUPLES`` tuples (soccer play at the DEBS 2013 sensor rates, delayed by
   ``PRESET``) written as plain CSV parts of 60 s of arrivals, in the DEBS 2013 layout, read by the
   built-in reader ``soccer_synthetic``;
2. the same rows as a **declared CSV** (a header, event and arrival times in µs, the values and the
   seven extra fields as attributes) and as **declared JSON lines**, written from the first
   candidate's bronze, one file per replay part;
3. the same rows in a **Kafka topic** of ``PARTITIONS`` partitions (``produce`` as fast as it goes, on
   a broker the run starts), read by ``ingest-kafka`` in one batch.

Each candidate ingests into a fresh lake (its tables created beforehand), ``REPEATS`` times in
rotating order; the figure is the fastest run. The time is the ingest call's, from the
plan to the last commit (the session is up already and the lake's tables exist: a DAG task adds
its process start, in the second part).

Part 2, **delay**, at the DAG's cadence: the replay's first ``DELAY_PLAY_S`` seconds are produced at
their own pace (``produce --speed 1 --live``) while, at each minute boundary, ``ingest-kafka`` and
then ``join-stream --start <boundary - 60 s> --end <boundary>`` run as processes, as the
``ingest_kafka`` and ``join_stream`` DAGs' tasks do. A joined pair's delay is the time its row was
written to ``gold/join_results`` minus the later of its two records' log-append times.

``bash infra/bench.sh sources [--quick]`` writes docs/benchmarks/sources.json, .md and .png;
``OOO_SOURCES_TUPLES`` sets the size, ``OOO_SOURCES_PARTS`` the parts (``throughput,delay``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import (
    DEFAULT_OUT,
    kafka_broker,
    log,
    machine,
    markdown_table,
    run_command,
    stage_command,
    write_json,
)
from outoforder.config import REPO_ROOT, Settings, load_settings
from outoforder.errors import StateError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from outoforder.stages.ingest.replay import ReplayParts

PRESET = "hpm_game1"
SEED = 11
TUPLES = 3_000_000
TUPLES_PER_PLAY_S = 10_800  # the DEBS 2013 rates: one ball at 2000 Hz, 44 leg sensors at 200 Hz
PART_S = 60.0
PARTITIONS = 4
REPEATS = 2
DELAY_PLAY_S = 240.0
CADENCE_S = 60  # the ingest_kafka and join_stream DAGs' schedule
TOPIC = "bench-sources"
LIVE_TOPIC = "bench-live"
CANDIDATES = ("built-in CSV", "declared CSV", "declared JSON lines", "Kafka topic")
RESULT = "RESULT "  # the line a timed run prints its figures on
ATTRS = ("a", "vx", "vy", "vz", "ax", "ay", "az")  # the DEBS 2013 fields bronze keeps as attributes


def _declarations(streams: list[str], lo: int, hi: int) -> str:
    """The declared sources of the run: the CSV and JSON-lines copies, and the topics."""
    from outoforder.stages.ingest.produce import declaration_toml

    plausible = f"plausible_event_us = [{min(lo, 0)}, {hi + 1}]\n"
    common = (
        'key = "key"\nevent_time = { column = "event_ts", unit = "us" }\n'
        'arrival = { column = "arrival_us", unit = "us" }\n'
        f'stream = {{ column = "stream", values = {streams!r} }}\n'.replace("'", '"')
        + 'values = { x = "x", y = "y", z = "z", value = "value" }\n'
        + f"attrs = {list(ATTRS)!r}\n".replace("'", '"')
        + plausible
    )
    return (
        f'[sources.decl-csv]\nformat = "csv"\nheader = true\n{common}\n'
        f'[sources.decl-jsonl]\nformat = "jsonl"\n{common}\n'
        + declaration_toml("kafka", TOPIC, tuple(streams), (lo, hi), ATTRS)
        + "\n"
        + declaration_toml("live", LIVE_TOPIC, tuple(streams))
    )


def _flat(bronze: DataFrame, files: int) -> DataFrame:
    """Bronze rows as flat records in arrival order, split into ``files`` runs of it."""
    from pyspark.sql import functions as F

    cols: list[Column | str] = [
        "stream", "key", "event_ts", F.col("arrival_ts").alias("arrival_us"), "x", "y", "z", "value",
        *(F.col("attrs")[a].alias(a) for a in ATTRS),
    ]  # fmt: skip
    return bronze.repartitionByRange(files, "arrival_seq").sortWithinPartitions("arrival_seq").select(*cols)


def _best_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A candidate's fastest run: on a quiet machine noise only adds time (every run is in the JSON)."""
    secs = min(r["seconds"] for r in rows)
    return {
        **rows[0],
        "seconds": round(secs, 2),
        "rows_per_s": round(rows[0]["rows"] / secs),
        "runs": len(rows),
    }


def _lake(spark: SparkSession, settings: Settings, work: Path, name: str) -> Settings:
    """``settings`` on a lake of its own under ``work``, its tables created and empty.

    Created before the clock starts: the figures are those of an ingest into a running lake (a
    DAG's tenth run), not of the first one, which also creates the tables (about 10 s here).
    """
    from outoforder.io import delta
    from outoforder.io.tables import ALL_TABLES

    path = work / "lakes" / name
    shutil.rmtree(path, ignore_errors=True)
    for table in ALL_TABLES:
        delta.ensure(spark, table, str(path))
    return dataclasses.replace(settings, lake_root=str(path))


def _files(spark: SparkSession, reader: str, paths: list[Path], into: Settings) -> int:
    """Ingest ``paths`` with ``reader`` (source named after it); the rows accepted."""
    from outoforder.stages.ingest.files import ingest_files
    from outoforder.stages.ingest.plan import FileSpec

    out = ingest_files(spark, into, [FileSpec(str(p), reader, reader) for p in paths])
    return sum(s.accepted for s in out)


def prepare(spark: SparkSession, settings: Settings, work: Path, tuples: int) -> tuple[ReplayParts, Settings]:
    """The replay's parts, and a lake with them in bronze (the built-in reader's): what is copied."""
    from outoforder.stages.ingest.replay import write_replay_parts

    seconds = float(-(-tuples // TUPLES_PER_PLAY_S))
    parts = write_replay_parts(work / "replay", PRESET, seconds, SEED, part_s=PART_S)
    log("sources", f"replay: {parts.tuples:,} tuples in {len(parts.paths)} parts ({parts.source})")
    log("sources", "warm-up and base lake: the parts with the built-in reader")
    base = _lake(spark, settings, work, "base")
    _files(spark, "soccer_synthetic", list(parts.paths), base)
    return parts, base


def child(job: dict[str, Any]) -> None:
    """One timed ingest in this process (``python -m benchmarks.sources JOB``): prints its result."""
    from outoforder.spark.session import get_spark
    from outoforder.stages.ingest.kafka import ingest_topic

    settings = load_settings(Path(job["config"]), env={**os.environ, "OOO_LAKE_ROOT": job["lake"]})
    spark = get_spark(settings, app_name="outoforder-sources-run")
    into = _lake(spark, settings, Path(job["lake"]).parent.parent, Path(job["lake"]).name)
    t0 = time.monotonic()
    if job["paths"]:
        rows = _files(spark, job["reader"], [Path(p) for p in job["paths"]], into)
    else:
        rows = ingest_topic(spark, into, job["reader"]).accepted
    print(RESULT + json.dumps({"rows": rows, "seconds": time.monotonic() - t0}), flush=True)
    spark.stop()


def throughput(
    spark: SparkSession, config: Path, work: Path, parts: ReplayParts, base: Settings
) -> list[dict[str, Any]]:
    """Part 1: each candidate ``REPEATS`` times into a fresh lake; one record per run."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE
    from outoforder.stages.ingest.produce import replay

    # the copies of the same rows, from the built-in reader's bronze
    bronze = delta.read(spark, BRONZE, base.lake_root).where(F.col("source") == "soccer_synthetic")
    flat = _flat(bronze, len(parts.paths))
    for kind in ("csv", "jsonl"):
        folder = work / f"copy-{kind}"
        shutil.rmtree(folder, ignore_errors=True)
        if kind == "csv":
            flat.write.option("header", True).csv(str(folder))
        else:
            flat.write.json(str(folder))
    copies = {k: sorted((work / f"copy-{k}").glob("part-*")) for k in ("csv", "jsonl")}
    log("sources", f"producing the rows into {TOPIC!r} ({PARTITIONS} partitions)")
    produced = replay(spark, base, "soccer_synthetic", TOPIC, partitions=PARTITIONS)
    log("sources", produced.line())
    sizes = {
        "built-in CSV": sum(p.stat().st_size for p in parts.paths),
        "declared CSV": sum(p.stat().st_size for p in copies["csv"]),
        "declared JSON lines": sum(p.stat().st_size for p in copies["jsonl"]),
    }
    inputs = {
        "built-in CSV": ("soccer_synthetic", [str(p) for p in parts.paths]),
        "declared CSV": ("decl-csv", [str(p) for p in copies["csv"]]),
        "declared JSON lines": ("decl-jsonl", [str(p) for p in copies["jsonl"]]),
        "Kafka topic": ("kafka", []),
    }
    records: list[dict[str, Any]] = []
    for rep in range(REPEATS):
        order = CANDIDATES[rep % len(CANDIDATES) :] + CANDIDATES[: rep % len(CANDIDATES)]
        for name in order:
            # each run in a process of its own, as a DAG task runs: nothing cached by the runs before
            lake_path = work / "lakes" / f"{name.replace(' ', '-')}-{rep}"
            reader, paths = inputs[name]
            job = json.dumps(
                {"config": str(config), "lake": str(lake_path), "reader": reader, "paths": paths}
            )
            out = run_command(
                [os.environ.get("PYSPARK_PYTHON") or sys.executable, "-m", "benchmarks.sources", job],
                {**os.environ, "OOO_WORK_DIR": str(work)},
                f"{name} (repeat {rep + 1})",
            )
            got = json.loads(next(ln for ln in out.splitlines() if ln.startswith(RESULT))[len(RESULT) :])
            rows, secs = int(got["rows"]), float(got["seconds"])
            records.append(
                {
                    "part": "throughput",
                    "candidate": name,
                    "repeat": rep,
                    "rows": rows,
                    "seconds": round(secs, 2),
                    "rows_per_s": round(rows / secs),
                    "input_mb": round(sizes.get(name, 0) / 2**20, 1) or None,
                }
            )
            log("sources", f"{name} (repeat {rep + 1}/{REPEATS}): {rows:,} rows in {secs:.1f} s")
            shutil.rmtree(lake_path, ignore_errors=True)
    if len({r["rows"] for r in records}) != 1:
        msg = f"the candidates ingested different row counts: {sorted({r['rows'] for r in records})}"
        raise StateError(msg)
    return records


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def delay(
    spark: SparkSession, base: Settings, config: Path, work: Path, env: dict[str, str]
) -> list[dict[str, Any]]:
    """Part 2: produce in real time, ingest and join at each minute boundary; one record per cycle."""
    from pyspark.sql import functions as F

    from outoforder.io import delta
    from outoforder.io.tables import BRONZE, JOIN_RESULTS

    lake_root = work / "lakes" / "delay"
    shutil.rmtree(lake_root, ignore_errors=True)
    shutil.copytree(base.lake_root, lake_root)  # the replay's bronze: what produce replays
    env = {**env, "OOO_LAKE_ROOT": str(lake_root)}
    limit = int(DELAY_PLAY_S * TUPLES_PER_PLAY_S)
    producer = subprocess.Popen(
        stage_command(config, "produce", "--source", "soccer_synthetic", "--topic", LIVE_TOPIC,
                      "--speed", "1", "--live", "--limit", str(limit), "--partitions", str(PARTITIONS)),
        env=env, stdout=subprocess.DEVNULL, stderr=(work / "produce.log").open("w"),
    )  # fmt: skip
    log("sources", f"producing {limit:,} records at their own pace ({DELAY_PLAY_S:g} s) into {LIVE_TOPIC!r}")
    cycles: list[dict[str, Any]] = []
    done_after = None
    deadline = time.time() + 2 * DELAY_PLAY_S + 3 * CADENCE_S
    boundary = (int(time.time()) // CADENCE_S + 1) * CADENCE_S
    while done_after is None or len(cycles) < done_after:
        if time.time() > deadline:
            producer.kill()
            msg = f"produce did not finish within {deadline:.0f}; see {work / 'produce.log'}"
            raise StateError(msg)
        # intervals follow each other, as a DAG's runs do (depends_on_past): a cycle that took
        # longer than the cadence delays the next interval's run, it does not skip it
        time.sleep(max(0.0, boundary - time.time()))
        if producer.poll() is not None and done_after is None:
            done_after = len(cycles) + 2  # two more cycles: the last records' interval closes
        cycle: dict[str, Any] = {"part": "delay", "cycle": len(cycles), "boundary": _utc(boundary)}
        for name, args in (
            ("ingest", ("ingest-kafka", "--source", "live")),
            ("join", ("join-stream", "--source", "live", "--start", str((boundary - CADENCE_S) * 10**6),
                      "--end", str(boundary * 10**6), "--catch-up")),
        ):  # fmt: skip
            t0 = time.time()
            proc = subprocess.run(
                stage_command(config, *args), env=env, capture_output=True, text=True, check=False
            )
            cycle[f"{name}_s"] = round(time.time() - t0, 1)
            if proc.returncode != 0:
                msg = (
                    f"cycle {len(cycles)}: {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}"
                )
                raise StateError(msg)
        cycle["finished_after_boundary_s"] = round(time.time() - boundary, 1)
        boundary += CADENCE_S
        cycles.append(cycle)
        log("sources", f"cycle {cycle['cycle']} at {cycle['boundary']}: ingest {cycle['ingest_s']} s, "
                       f"join {cycle['join_s']} s")  # fmt: skip
    if producer.wait() != 0:
        msg = f"produce failed ({producer.returncode}); see {work / 'produce.log'}"
        raise StateError(msg)
    bronze = delta.read(spark, BRONZE, str(lake_root)).where(F.col("source") == "live")
    arrivals = bronze.select("arrival_seq", "arrival_ts")
    pairs = (
        delta.read(spark, JOIN_RESULTS, str(lake_root))
        .where(F.col("source") == "live")
        .join(arrivals.toDF("r_seq", "r_arrival"), "r_seq")
        .join(arrivals.toDF("s_seq", "s_arrival"), "s_seq")
        .select(
            # the cycle whose pass emitted it: the first boundary (a whole multiple of the cadence) after
            ((F.floor(F.col("emitted_at_us") / F.lit(CADENCE_S * 10**6)) + 1) * F.lit(CADENCE_S * 10**6))
            .cast("long")
            .alias("interval_end_us"),
            ((F.col("written_at_us") - F.greatest("r_arrival", "s_arrival")) / 1e6).alias("delay_s"),
        )
    )
    stats = (
        pairs.groupBy("interval_end_us")
        .agg(
            F.count("*").alias("pairs"),
            F.percentile_approx("delay_s", [0.5, 0.95], 1000).alias("q"),
            F.max("delay_s").alias("max_delay_s"),
        )
        .orderBy("interval_end_us")
        .collect()  # one row per cycle
    )
    by_end = {r["interval_end_us"]: r for r in stats}
    overall = pairs.agg(
        F.count("*"), F.percentile_approx("delay_s", [0.5, 0.95, 0.99], 1000), F.max("delay_s")
    ).first()
    for c in cycles:
        end_us = int(datetime.fromisoformat(c["boundary"]).timestamp() * 1_000_000)
        r = by_end.get(end_us)
        c |= {
            "pairs": r["pairs"] if r else 0,
            "p50_delay_s": round(r["q"][0], 1) if r else None,
            "p95_delay_s": round(r["q"][1], 1) if r else None,
            "max_delay_s": round(r["max_delay_s"], 1) if r else None,
        }
    if overall is None or not overall[0]:
        msg = "no joined pair reached gold/join_results in the delay run"
        raise StateError(msg)
    cycles.append(
        {
            "part": "delay",
            "cycle": "all",
            "pairs": overall[0],
            "p50_delay_s": round(overall[1][0], 1),
            "p95_delay_s": round(overall[1][1], 1),
            "p99_delay_s": round(overall[1][2], 1),
            "max_delay_s": round(overall[2], 1),
        }
    )
    return cycles


def _config(work: Path, streams: list[str], lo: int, hi: int, bootstrap: str) -> Path:
    path = work / "sources.toml"
    path.write_text(
        '[quality]\non_violation = "warn"\n'
        f'[kafka]\nbootstrap = "{bootstrap}"\n\n' + _declarations(streams, lo, hi)
    )
    return path


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Both parts; writes docs/benchmarks/sources.json, .md and .png."""
    del data_dir, spark_on
    from outoforder.sources.sensors import SYNTHETIC_STREAMS
    from outoforder.spark.session import get_spark

    tuples = int(os.environ.get("OOO_SOURCES_TUPLES", 200_000 if quick else TUPLES))
    parts = [p for p in os.environ.get("OOO_SOURCES_PARTS", "throughput,delay").split(",") if p]
    work = REPO_ROOT / ".local" / "bench" / "sources"
    work.mkdir(parents=True, exist_ok=True)
    streams = sorted(set(SYNTHETIC_STREAMS.values()))
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        **machine(),
        "replay": f"{PRESET}, seed {SEED}, about {tuples:,} tuples in parts of {PART_S:g} s of arrivals",
        "partitions": PARTITIONS,
        "repeats": REPEATS,
        "delay_play_s": DELAY_PLAY_S,
        "cadence_s": CADENCE_S,
    }
    records: list[dict[str, Any]] = []
    with ExitStack() as stack:
        bootstrap = stack.enter_context(kafka_broker(work / "kafka"))
        # event times of the synthetic game: its clock, within a day of kick-off
        config = _config(work, streams, 0, 10**14, bootstrap)
        env = {**os.environ, "OOO_WORK_DIR": str(work)}
        settings = load_settings(config, env=env)
        spark = get_spark(settings, app_name="outoforder-sources")
        replayed, base = prepare(spark, settings, work, tuples)
        # a part not run this time keeps an earlier run's records
        kept = _earlier(out_dir / "sources.json", set(parts))
        for part in ("throughput", "delay"):
            if part not in parts:
                continue
            if part == "throughput":
                records += throughput(spark, config, work, replayed, base)
            else:
                records += delay(spark, base, config, work, env)
            meta["minutes"] = round((time.monotonic() - t0) / 60, 1)
            _write(out_dir, meta, kept + records)  # after each part: a failure later keeps it
    return 0


def _earlier(path: Path, rerun: set[str]) -> list[dict[str, Any]]:
    """The records of an earlier run for the parts this run does not repeat."""
    if not path.exists():
        return []
    try:
        return [r for r in json.loads(path.read_text())["records"] if r["part"] not in rerun]
    except (ValueError, KeyError, TypeError) as e:
        msg = f"{path} is not a sources result ({e}); move it away to start afresh"
        raise StateError(msg) from e


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per throughput candidate: its fastest run, and the ratio to the built-in reader's."""
    rows = []
    for name in CANDIDATES:
        rs = [r for r in records if r.get("candidate") == name]
        if rs:
            rows.append(_best_row(rs))
    base = next((r for r in rows if r["candidate"] == "built-in CSV"), None)
    for r in rows:
        r["vs_built_in"] = round(r["rows_per_s"] / base["rows_per_s"], 2) if base else None
    return rows


def _write(out_dir: Path, meta: dict[str, Any], records: list[dict[str, Any]]) -> None:
    write_json(out_dir / "sources.json", meta, records)
    rows = summarize(records)
    cycles = [r for r in records if r["part"] == "delay"]
    lines = [
        "# Sources: ingest throughput and produce-to-gold delay",
        "",
        f"`bash infra/bench.sh sources` on {meta['date']} at {meta['commit']} ({meta['minutes']} min, "
        f"{meta['cpus']} CPUs, local[2]). Replay: {meta['replay']}.",
        "",
        "## Throughput into bronze",
        "",
        "The same rows through each way in, each into a fresh lake whose tables exist, each run in a "
        f"process of its own; the fastest of {meta['repeats']} runs in rotating order. The time is the "
        "ingest call's (plan, read, parse, quarantine check, arrival order, commits), without the "
        "process start. "
        f"The Kafka topic has {meta['partitions']} partitions and is read in one batch.",
        "",
        markdown_table(
            rows,
            [
                ("candidate", "source", ""),
                ("rows", "rows", ","),
                ("input_mb", "input (MB)", ""),
                ("seconds", "seconds (fastest run)", ".1f"),
                ("rows_per_s", "rows/s", ","),
                ("vs_built_in", "× built-in reader", ".2f"),
            ],
        ),
    ]
    if cycles:
        lines += [
            "",
            "## Delay from produce to a joined pair in gold, at the DAGs' cadence",
            "",
            f"The replay's first {meta['delay_play_s']:g} s produced at their own pace (`produce --speed 1 "
            f"--live`); at every {meta['cadence_s']} s boundary, `ingest-kafka` then `join-stream` over the "
            "interval that just closed, each as its own process (as the `ingest_kafka` and `join_stream` "
            "DAG tasks run). Delay of a pair: written to `gold/join_results` minus the later of its two "
            "records' log-append times. Half the cadence on average is the wait for the interval to close.",
            "",
            markdown_table(
                cycles,
                [
                    ("cycle", "cycle", ""),
                    ("boundary", "interval end (UTC)", ""),
                    ("ingest_s", "ingest-kafka (s)", ""),
                    ("join_s", "join-stream (s)", ""),
                    ("pairs", "pairs", ","),
                    ("p50_delay_s", "p50 delay (s)", ""),
                    ("p95_delay_s", "p95 delay (s)", ""),
                    ("max_delay_s", "max delay (s)", ""),
                ],
            ),
        ]
    lines += ["", "Per-run records: `sources.json`; chart: `sources.png`.", ""]
    (out_dir / "sources.md").write_text("\n".join(lines))
    _plot(rows, cycles, out_dir / "sources.png")
    log("sources", f"written {out_dir / 'sources.json'}, .md and .png")


def _plot(rows: list[dict[str, Any]], cycles: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].barh([r["candidate"] for r in rows], [r["rows_per_s"] / 1000 for r in rows])
    axes[0].axvline(100, color="red", linestyle="--", label="target for Kafka: 100k rows/s")
    axes[0].set(xlabel="thousand rows/s into bronze (local[2])", title="Ingest throughput")
    axes[0].legend(fontsize=7)
    per = [c for c in cycles if c["cycle"] != "all" and c.get("p50_delay_s") is not None]
    if per:
        x = [c["cycle"] for c in per]
        axes[1].plot(x, [c["p50_delay_s"] for c in per], marker="o", label="p50")
        axes[1].plot(x, [c["p95_delay_s"] for c in per], marker="o", label="p95")
        axes[1].plot(x, [c["max_delay_s"] for c in per], marker="o", label="max")
        axes[1].legend(fontsize=7)
    axes[1].set(xlabel="cycle (one per minute)", ylabel="seconds", title="Produce to a joined pair in gold")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    child(json.loads(sys.argv[1]))
