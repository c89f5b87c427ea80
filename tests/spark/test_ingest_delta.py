"""Ingest into Delta: round trip, idempotence, accounting, duplicates, crash resume, interval reads."""

import gzip
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from outoforder.errors import EXIT_QUALITY
from outoforder.io import delta, deltalog
from outoforder.io.files import staging_name, staging_uri
from outoforder.io.tables import BRONZE, INGEST_LOG, QUARANTINE, SEQ_PER_FILE
from outoforder.quality.bronze import validate_bronze
from outoforder.stages.cli import main
from outoforder.stages.ingest.files import ingest_file
from outoforder.stages.stats import source_stats

pytestmark = [pytest.mark.spark, pytest.mark.delta]

GOOD = "61,10634757171903878,27058,-130,-110,178392,2700132,3054,-9332,-1892,4149,-8999,1339"


def soccer_lines(n, start=0):
    return [GOOD.replace("10634757171903878", str(10634757171903878 + (start + i) * 10**9)) for i in range(n)]


def write(path, lines, gz=False):
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def version(spark, table, settings):
    return deltalog.newest_version(table.path(settings.lake_root))


def crash_after_bronze(monkeypatch):
    """Make every bronze append raise once it committed; returns the real append, to put back."""
    real_append = delta.append_once

    def append_then_crash(df, table, *args, **kwargs):
        committed = real_append(df, table, *args, **kwargs)
        if table is BRONZE:
            raise RuntimeError("simulated crash")
        return committed

    monkeypatch.setattr(delta, "append_once", append_then_crash)
    return real_append


def test_delta_round_trip_and_transaction_ids_make_appends_idempotent(spark, settings):
    delta.ensure(spark, QUARANTINE, settings.lake_root)
    rows = [("s", "id", "f", 1, "raw", "column_count", "d")]
    df = spark.createDataFrame(rows, QUARANTINE.schema)
    assert delta.append_once(df, QUARANTINE, settings.lake_root, "app", 0)
    assert not delta.append_once(df, QUARANTINE, settings.lake_root, "app", 0)  # replay: skipped
    back = delta.read(spark, QUARANTINE, settings.lake_root).collect()
    assert [tuple(r) for r in back] == rows
    delta.append_once(df, QUARANTINE, settings.lake_root, "app", 1)  # next version: applied
    assert delta.read(spark, QUARANTINE, settings.lake_root).count() == 2


def test_real_file_lands_in_bronze_with_readme_statistics(spark, settings, data_dir):
    s = ingest_file(spark, settings, data_dir / "ooo-dataset" / "d-1.csv.gz", "ooo", "ooo/d-1")
    assert (s.rows_read, s.accepted, s.quarantined, s.skipped) == (9600, 9600, 0, False)
    stats = source_stats(spark, settings, "ooo/d-1")
    assert stats["overall"]["late"] == 1544
    assert stats["overall"]["max_delay"] == pytest.approx(4.544)
    assert stats["per_key"]["dev_15"]["max_delay"] == pytest.approx(4.502)
    bronze = delta.read(spark, BRONZE, settings.lake_root)
    rows = bronze.orderBy("arrival_seq").select("arrival_seq", "line_no").collect()
    # file order = arrival order; the first file has ordinal 0, so arrival_seq = line (1 = header)
    assert [r["arrival_seq"] for r in rows] == [r["line_no"] for r in rows] == list(range(2, 9602))


def test_ingesting_the_same_file_twice_changes_nothing(spark, settings, tmp_path):
    f = write(tmp_path / "a.csv", soccer_lines(50))
    first = ingest_file(spark, settings, f, "debs2013", "t/a")
    versions = {t.name: version(spark, t, settings) for t in (BRONZE, QUARANTINE, INGEST_LOG)}
    again = ingest_file(spark, settings, f, "debs2013", "t/a")
    assert again.skipped and not first.skipped
    assert {t.name: version(spark, t, settings) for t in (BRONZE, QUARANTINE, INGEST_LOG)} == versions
    assert delta.read(spark, BRONZE, settings.lake_root).count() == 50


# A small file's Spark jobs, counted on a warm session (issue 73's budget of a run, for a file of
# a few lines): the identification, the parse and append (the ingest log is read and written on
# the driver); with the source's history in bronze, the hash pass; with rejects, quarantine
JOBS_PER_FILE = {"new source": 4, "history": 10, "history and rejects": 14, "already ingested": 1}


def test_a_small_file_costs_a_counted_handful_of_spark_jobs(spark, settings, tmp_path):
    ingest_file(spark, settings, write(tmp_path / "0.csv", soccer_lines(20)), "debs2013", "t/a")  # the tables
    sc = spark.sparkContext
    files = {
        "new source": ("t/b", soccer_lines(20, 20)),
        "history": ("t/a", soccer_lines(20, 40)),
        "history and rejects": ("t/a", [*soccer_lines(20, 60), "garbage"]),
        "already ingested": ("t/a", [*soccer_lines(20, 60), "garbage"]),
    }
    for i, (case, (source, lines)) in enumerate(files.items()):
        f = write(tmp_path / f"{i}.csv", lines)
        sc.setJobGroup(f"file-{i}", case)
        s = ingest_file(spark, settings, f, "debs2013", source)
        sc.setJobGroup("", "")
        assert (s.skipped, s.quarantined) == (case == "already ingested", case == "history and rejects")
        jobs = len(sc.statusTracker().getJobIdsForGroup(f"file-{i}"))
        assert jobs <= JOBS_PER_FILE[case], (case, jobs)


def test_bad_rows_are_quarantined_and_accounted_in_the_log(spark, settings, tmp_path):
    lines = [*soccer_lines(10), "garbage", GOOD.replace("27058", "nan?"), soccer_lines(1)[0], ""]
    f = write(tmp_path / "bad.csv.gz", lines, gz=True)
    s = ingest_file(spark, settings, f, "debs2013", "t/bad")
    assert (s.rows_read, s.accepted, s.quarantined) == (13, 10, 3)
    assert s.reasons == {"column_count": 1, "not_numeric": 1, "duplicate_row": 1}
    q = delta.read(spark, QUARANTINE, settings.lake_root).orderBy("line_no").collect()
    assert [(r["line_no"], r["reason"]) for r in q] == [
        (11, "column_count"),
        (12, "not_numeric"),
        (13, "duplicate_row"),
    ]
    assert q[0]["raw_line"] == "garbage"
    started, done = (
        delta.read(spark, INGEST_LOG, settings.lake_root).where(F.col("status") == s).collect()
        for s in ("started", "done")
    )
    assert (len(started), len(done)) == (1, 1)
    assert started[0]["file_ordinal"] == done[0]["file_ordinal"] == 0
    log = done[0]
    assert (log["rows_read"], log["rows_accepted"], log["rows_quarantined"], log["blank_lines"]) == (
        13,
        10,
        3,
        1,
    )
    assert log["rows_read"] == log["rows_accepted"] + log["rows_quarantined"]
    assert (log["arrival_seq_first"], log["arrival_seq_last"]) == (1, 10)


def test_rows_repeated_by_a_later_file_of_the_same_source_are_quarantined(spark, settings, tmp_path):
    a = write(tmp_path / "part1.csv", soccer_lines(20))
    b = write(tmp_path / "part2.csv", soccer_lines(20, start=15))  # 5 rows overlap
    ingest_file(spark, settings, a, "debs2013", "t/parts")
    s = ingest_file(spark, settings, b, "debs2013", "t/parts")
    assert (s.accepted, s.quarantined, s.reasons) == (15, 5, {"duplicate_row": 5})
    bronze = delta.read(spark, BRONZE, settings.lake_root)
    assert bronze.count() == 35
    assert bronze.select("row_hash").distinct().count() == 35
    seqs = [r[0] for r in bronze.orderBy("arrival_seq").select("arrival_seq").collect()]
    assert seqs == list(range(1, 21)) + [SEQ_PER_FILE + line for line in range(6, 21)]
    validate_bronze(spark, settings)


def test_an_interrupted_ingest_resumes_without_loss_or_duplicates(spark, settings, tmp_path, monkeypatch):
    import dataclasses

    # small parts and files: the file is read by several tasks and lands in several Parquet files
    ingest = dataclasses.replace(settings.ingest, part_bytes=2_000, file_rows=30, batch_rows=16)
    small = dataclasses.replace(settings, ingest=ingest)
    f = write(tmp_path / "big.csv", [*soccer_lines(100), soccer_lines(1)[0]])  # the last line repeats
    g = write(tmp_path / "other.csv", soccer_lines(40, start=1000))
    real_append = crash_after_bronze(monkeypatch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        ingest_file(spark, small, f, "debs2013", "t/crash")
    # bronze is committed, the quarantined duplicate and the log's done row are not; the parsed
    # rows staged between the jobs are gone all the same
    assert delta.read(spark, BRONZE, small.lake_root).count() == 100
    assert not list((Path(small.lake_root) / "_staging").glob("*"))
    assert delta.read(spark, QUARANTINE, small.lake_root).count() == 0
    monkeypatch.setattr(delta, "append_once", real_append)
    # a process killed mid-ingest (no finally ran) left its staged rows two days ago: the next
    # ingest removes them
    killed = Path(staging_uri(small.lake_root, staging_name("ingest", time.time() - 2 * 24 * 3600)))
    (killed / "file_idx=0").mkdir(parents=True)
    (killed / "file_idx=0" / "part-0.parquet").write_bytes(b"rows")
    # another file gets in between: it must not take the crashed file's sequence numbers
    other = ingest_file(spark, small, g, "debs2013", "t/other")
    s = ingest_file(spark, small, f, "debs2013", "t/crash")
    assert (s.accepted, s.quarantined, s.reasons, other.accepted) == (100, 1, {"duplicate_row": 1}, 40)
    bronze = delta.read(spark, BRONZE, small.lake_root)
    crashed = bronze.where(F.col("source") == "t/crash").orderBy("arrival_seq").collect()
    assert [r["arrival_seq"] for r in crashed] == list(range(1, 101))
    assert [r["line_no"] for r in crashed] == list(range(1, 101))
    assert bronze.select("arrival_seq").distinct().count() == 140
    (dup,) = delta.read(spark, QUARANTINE, small.lake_root).collect()
    assert (dup["line_no"], dup["reason"]) == (101, "duplicate_row")
    log = delta.read(spark, INGEST_LOG, small.lake_root).where(F.col("status") == "done").collect()
    assert sorted((r["source"], r["file_ordinal"]) for r in log) == [("t/crash", 0), ("t/other", 1)]
    validate_bronze(spark, small)
    assert not list((Path(small.lake_root) / "_staging").glob("*"))


def test_a_file_without_duplicates_resumes_from_its_bronze_commit(spark, settings, tmp_path, monkeypatch):
    """Parsed and appended in one pass (nothing staged): a rerun takes the counts again, appends the rest."""
    import dataclasses

    ingest = dataclasses.replace(settings.ingest, part_bytes=2_000, file_rows=30, batch_rows=16)
    small = dataclasses.replace(settings, ingest=ingest)
    f = write(tmp_path / "clean.csv", [*soccer_lines(60), "garbage", *soccer_lines(40, start=60)])
    real_append = crash_after_bronze(monkeypatch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        ingest_file(spark, small, f, "debs2013", "t/clean")
    assert delta.read(spark, BRONZE, small.lake_root).count() == 100
    assert delta.read(spark, QUARANTINE, small.lake_root).count() == 0
    monkeypatch.setattr(delta, "append_once", real_append)
    killed = Path(staging_uri(small.lake_root, staging_name("ingest", time.time() - 2 * 24 * 3600)))
    killed.mkdir(parents=True)
    s = ingest_file(spark, small, f, "debs2013", "t/clean")
    assert (s.lines, s.accepted, s.quarantined, s.reasons) == (101, 100, 1, {"column_count": 1})
    bronze = delta.read(spark, BRONZE, small.lake_root).orderBy("arrival_seq").collect()
    assert [r["line_no"] for r in bronze] == [*range(1, 61), *range(62, 102)]
    (bad,) = delta.read(spark, QUARANTINE, small.lake_root).collect()
    assert (bad["line_no"], bad["raw_line"]) == (61, "garbage")
    (done,) = delta.read(spark, INGEST_LOG, small.lake_root).where(F.col("status") == "done").collect()
    assert (done["arrival_seq_first"], done["arrival_seq_last"], done["rows_read"]) == (1, 101, 101)
    validate_bronze(spark, small)
    assert not killed.exists()


def test_interval_reads_are_half_open(spark, settings, data_dir):
    ingest_file(spark, settings, data_dir / "ooo-dataset" / "d-2.csv.gz", "ooo", "ooo/d-2")
    by_seq = delta.read_arrivals(spark, BRONZE, settings.lake_root, source="ooo/d-2", seq_range=(100, 200))
    assert by_seq.count() == 100
    assert by_seq.agg(F.min("arrival_seq"), F.max("arrival_seq")).first() == (100, 199)
    first = delta.read(spark, BRONZE, settings.lake_root).agg(F.min("arrival_ts")).first()[0]
    window = delta.read_arrivals(
        spark, BRONZE, settings.lake_root, source="ooo/d-2", arrival_ts_range=(first, first + 10_000_000)
    )
    got = window.agg(F.min("arrival_ts"), F.max("arrival_ts"), F.count("*")).first()
    assert got[0] == first and got[1] < first + 10_000_000 and got[2] > 0
    assert delta.read_arrivals(spark, BRONZE, settings.lake_root, source="nope").count() == 0


def test_quality_suite_fails_when_bronze_is_corrupted(spark, settings, tmp_path, capsys):
    f = write(tmp_path / "q.csv", soccer_lines(5))
    ingest_file(spark, settings, f, "debs2013", "t/q")
    results = validate_bronze(spark, settings)  # the whole table: a Spark frame for GX
    assert all(r.success for r in results)
    # and GX left nothing in the server's cache: every later write would re-plan what it kept
    assert spark._jsparkSession.sharedState().cacheManager().isEmpty()
    dup = delta.read(spark, BRONZE, settings.lake_root).limit(1)
    dup.write.format("delta").mode("append").save(BRONZE.path(settings.lake_root))
    failed = {r.suite: r.success for r in validate_bronze(spark, settings, fail=False)}
    assert failed == {"bronze_arrivals": False, "bronze_accounting": False}
    # failing, the stage raises a QualityError and exits with its own status: what fails the
    # Airflow task without a retry (a verdict on what is written would only repeat)
    config = tmp_path / "c.toml"
    config.write_text(f'[lake]\nroot = "{settings.lake_root}"\n')
    assert main(["--config", str(config), "validate-bronze"]) == EXIT_QUALITY
    err = capsys.readouterr().err
    assert "CheckFailed" in err and "bronze_arrivals" in err


def test_stats_command_prints_per_stream_and_per_key_detail(spark, settings, tmp_path, capsys, data_dir):
    ingest_file(spark, settings, data_dir / "ooo-dataset" / "d-5.csv.gz", "ooo", "ooo/d-5")
    config = tmp_path / "c.toml"
    config.write_text(f'[lake]\nroot = "{settings.lake_root}"\n')
    out_json = tmp_path / "stats.json"
    assert main(["--config", str(config), "stats", "--detail", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "ooo/d-5" in out and "  stream devices" in out and "    key dev_" in out  # the --detail table
    import json

    (stats,) = json.loads(out_json.read_text())
    o = stats["overall"]  # the dataset README's figures
    assert (o["late"], round(100 * o["late_frac"], 2), round(o["max_delay"], 3)) == (1_584, 18.86, 1.415)
    assert stats["n_keys"] == 7
