"""Declared sources through ingest: a CSV or JSON-lines file of one's own into bronze, via the CLI.

- The README's example (include/examples/warehouse) goes from its one declaration to bronze, the
  stream join, its check and the aggregates with the README's commands, read from the README, and
  nothing else; their output is what the README shows.
- A declaration that does not fit a file (a missing column, a field in another unit) stops the
  ingest before anything is written, with a message naming what is wrong.
- A folder of files continues one source in file-name order; JSON lines read nested fields.
- The European example (include/examples/fleet: decimal commas, GPS positions) goes through bronze,
  the join in metres (every pair within θ on the ground) and the aggregates.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import shlex

import pytest
from pyspark.sql import functions as F

from outoforder.config import REPO_ROOT, load_settings
from outoforder.io import delta
from outoforder.io.tables import AGG_RESULTS, BRONZE, INGEST_LOG, JOIN_RESULTS, QUARANTINE
from outoforder.sources.geo import LocalProjection
from outoforder.stages.cli import main
from outoforder.stages.ingest.files import ingest_files
from outoforder.stages.ingest.plan import FileSpec

pytestmark = [pytest.mark.spark, pytest.mark.delta]
README_FLOW = pytest.mark.integration  # the README example through the join and the aggregates (about 45 s)

EXAMPLE = REPO_ROOT / "include" / "examples" / "warehouse"
PLANT = """
[sources.plant]
format = "csv"
stream = { column = "line", values = ["press"] }
key = "sensor"
event_time = { column = "ts", unit = "ms" }
values = { value = "temp" }
attrs = ["*"]
"""


def config(tmp_path, settings, extra=""):
    path = tmp_path / "mine.toml"
    path.write_text(f'[lake]\nroot = "{settings.lake_root}"\n[quality]\non_violation = "warn"\n{extra}')
    return path


def run(cfg, *args, expect=0):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["--config", str(cfg), *map(str, args)])
    assert rc == expect, (out.getvalue() + err.getvalue())[-4000:]
    return out.getvalue() + err.getvalue()


def readme_commands():
    """The README's stage commands, as written (its "own stream" block): (arguments, output shown).

    An argument naming a file of the repository is made absolute; an output line shown under a
    command (``#   ...``) is expected in its output, up to a closing ``...``.
    """
    text = (REPO_ROOT / "README.md").read_text().split("## Your own stream", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    prefix = "$py -m outoforder.stages --config $cfg "
    commands: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith(prefix):
            words = shlex.split(line.removeprefix(prefix), comments=True)
            commands.append(([str(REPO_ROOT / w) if (REPO_ROOT / w).is_file() else w for w in words], []))
        elif line.startswith("#   ") and commands:
            commands[-1][1].append(line.removeprefix("#   ").strip().removesuffix("...").rstrip(" ,"))
    return commands


@README_FLOW
def test_the_readme_example_goes_through_ingest_the_join_and_the_aggregates(spark, settings, tmp_path):
    # the README's commands and nothing else, their output as the README shows it
    cfg = tmp_path / "c.toml"
    cfg.write_text((EXAMPLE / "warehouse.toml").read_text() + f'\n[lake]\nroot = "{settings.lake_root}"\n')
    commands = readme_commands()
    assert [c[0] for c, _ in commands] == ["ingest", "join-stream", "validate-join", "aggregate-stream"]
    assert all(shown for c, shown in commands if c[0] in ("ingest", "validate-join"))
    for args, shown in commands:
        out = run(cfg, *args)
        for line in shown:
            assert line in out, (args[0], line, out[-2000:])

    bronze = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == "warehouse")
    per_stream = {r["stream"]: r["count"] for r in bronze.groupBy("stream").count().collect()}
    assert per_stream == {"forklift": 1799, "picker": 2698}
    row = bronze.orderBy("arrival_seq").first()
    assert (row["key"], row["event_ts"], row["arrival_ts"]) == (
        "pk-02",
        1_731_657_600_019_000,
        1_731_657_600_021_000,
    )
    assert (row["x"], row["y"], row["value"]) == (6.68, 6.22, 1.35)
    assert dict(row["attrs"]) == {"battery_pct": "76.8", "site": "north"}
    q = delta.read(spark, QUARANTINE, settings.lake_root).where(F.col("reason") == "not_numeric").first()
    assert q["detail"] == "column 'x_m': 'n/a'"
    run(cfg, "validate-bronze")
    assert delta.read(spark, JOIN_RESULTS, settings.lake_root).count() > 0
    windows = delta.read(spark, AGG_RESULTS, settings.lake_root)
    assert windows.count() > 0 and windows.where("value IS NULL").isEmpty()


def test_a_declaration_that_does_not_fit_the_file_stops_before_anything_is_written(spark, settings, tmp_path):
    f = tmp_path / "plant.csv"
    f.write_text("line,sensor,temp\npress,s1,20.5\n")
    out = run(config(tmp_path, settings, PLANT), "ingest", "--file", f, "--reader", "plant", expect=2)
    assert "no column 'ts'" in out and "its columns: line, sensor, temp" in out
    f.write_text(
        "line,sensor,ts,temp\n" + "".join(f"press,s1,2024-01-0{i}T00:00:00Z,20\n" for i in range(1, 6))
    )
    out = run(config(tmp_path, settings, PLANT), "ingest", "--file", f, "--reader", "plant", expect=2)
    assert "none of the first 5 records fits the declaration: not_numeric, column 'ts'" in out
    for table in (BRONZE, QUARANTINE, INGEST_LOG):
        assert (
            not delta.exists(spark, table, settings.lake_root)
            or delta.read(spark, table, settings.lake_root).isEmpty()
        )
    out = run(config(tmp_path, settings), "ingest", "--file", f, "--reader", "plant", expect=2)
    assert "unknown reader 'plant'" in out and "add a [sources.<name>] table" in out

    # the landing zone's way: the file that does not fit is set aside with its reason, the rest goes on
    good = tmp_path / "good.csv"
    good.write_text("line,sensor,ts,temp\npress,s1,1700000000000,20\npress,s2,1700000000001,21\n")
    mine = load_settings(config(tmp_path, settings, PLANT))
    misfits: dict[str, str] = {}
    specs = [FileSpec(str(p), "plant", "plant") for p in (f, good)]
    (summary,) = ingest_files(spark, mine, specs, misfits=misfits)
    assert summary.accepted == 2 and list(misfits) == [str(f)]
    assert "none of the first 5 records fits the declaration" in misfits[str(f)]


def test_a_folder_continues_one_source_and_json_lines_read_nested_fields(spark, settings, tmp_path):
    folder = tmp_path / "drop"
    folder.mkdir()
    for i, name in enumerate(("b.jsonl", "a.jsonl")):
        recs = [
            {"m": {"id": f"m{j}", "kwh": j * 1.5}, "t": 1_700_000_000 + 10 * i + j, "zone": "z"}
            for j in range(3)
        ]
        (folder / name).write_text("\n".join(json.dumps(r) for r in recs) + "\n{broken\n")
    meters = """
[sources.meters]
format = "jsonl"
stream = "meters"
key = "m.id"
event_time = { column = "t", unit = "s" }
values = { value = "m.kwh" }
attrs = ["zone"]
"""
    out = run(config(tmp_path, settings, meters), "ingest", "--file", folder, "--reader", "meters")
    assert out.count("3 accepted + 1 quarantined (not_json=1)") == 2
    rows = delta.read(spark, BRONZE, settings.lake_root).orderBy("arrival_seq").collect()
    assert [r["source_file"].rsplit("/", 1)[1] for r in rows] == ["a.jsonl"] * 3 + ["b.jsonl"] * 3
    assert [r["event_ts"] for r in rows[:3]] == [1_700_000_010_000_000 + j * 1_000_000 for j in range(3)]
    assert [(r["key"], r["value"], dict(r["attrs"])) for r in rows[:2]] == [
        ("m0", 0.0, {"zone": "z"}),
        ("m1", 1.5, {"zone": "z"}),
    ]
    log = delta.read(spark, INGEST_LOG, settings.lake_root).where("status = 'done'").collect()
    assert {r["source"] for r in log} == {"meters"} and {r["reader"] for r in log} == {"meters"}
    assert load_settings(config(tmp_path, settings, meters), env={}).sources["meters"].key == "m.id"


def test_a_parquet_file_is_read_by_its_column_names_and_types(spark, settings, tmp_path):
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
    table = pa.table(
        {
            "vehicle": pa.array([7, 8, None, 7]),
            "seen_at": pa.array(
                [t0 + dt.timedelta(seconds=s) for s in (2, 1, 3, 4)], pa.timestamp("ms", "UTC")
            ),
            "pos": pa.array([{"lon": 1.5, "lat": 2.5}] * 4),
            "fare": pa.array([10.0, float("nan"), 3.0, 4.0]),
        }
    )
    f = tmp_path / "trips.parquet"
    pq.write_table(table, f)
    trips = """
[sources.trips]
format = "parquet"
stream = "trips"
key = "vehicle"
event_time = { column = "seen_at", unit = "iso8601" }
values = { x = "pos.lon", y = "pos.lat", value = "fare" }
"""
    out = run(config(tmp_path, settings, trips), "ingest", "--file", f, "--reader", "trips")
    assert "4 rows read = 2 accepted + 2 quarantined (non_finite_value=1, null_key=1)" in out
    rows = delta.read(spark, BRONZE, settings.lake_root).orderBy("arrival_seq").collect()
    assert [(r["key"], r["event_ts"], r["x"], r["y"], r["value"], r["line_no"]) for r in rows] == [
        ("7", 1_714_564_802_000_000, 1.5, 2.5, 10.0, 1),
        ("7", 1_714_564_804_000_000, 1.5, 2.5, 4.0, 4),
    ]
    q = delta.read(spark, QUARANTINE, settings.lake_root).orderBy("line_no").collect()
    assert [(r["reason"], r["detail"]) for r in q] == [
        ("non_finite_value", "column 'fare': 'nan'"),
        ("null_key", "column 'vehicle' is empty"),
    ]
    assert '"vehicle": null' in q[1]["raw_line"]  # the row as JSON, for whoever looks at it
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.rename_columns(["vehicle", "when", "pos", "fare"]), bad)
    out = run(config(tmp_path, settings, trips), "ingest", "--file", bad, "--reader", "trips", expect=2)
    assert "no column 'seen_at'" in out and "its columns: vehicle, when, pos, fare" in out


@README_FLOW
def test_the_european_example_goes_through_ingest_the_join_in_metres_and_the_aggregates(
    spark, settings, tmp_path
):
    # docs/sources.md's second example: semicolons, decimal commas, ISO times with offsets, GPS positions
    from tests.sources.test_geo import vincenty_m

    fleet = REPO_ROOT / "include" / "examples" / "fleet"
    cfg = tmp_path / "c.toml"
    cfg.write_text((fleet / "fleet.toml").read_text() + f'\n[lake]\nroot = "{settings.lake_root}"\n')
    out = run(cfg, "ingest", "--file", fleet / "positions.csv.gz", "--reader", "fleet")
    assert (
        "1,260 rows read = 1,256 accepted + 4 quarantined "
        "(arrival_before_event=1, column_count=1, not_numeric=1, out_of_range=1)"
    ) in out
    raw = gzip.decompress((fleet / "positions.csv.gz").read_bytes()).decode().splitlines()
    bronze = delta.read(spark, BRONZE, settings.lake_root).where(F.col("source") == "fleet")
    rows = {
        r["arrival_seq"]: r for r in bronze.select("arrival_seq", "line_no", "event_ts", "x", "y").collect()
    }
    first = min(rows.values(), key=lambda r: r["line_no"])
    lat, lon = (float(v.replace(",", ".")) for v in raw[first["line_no"] - 1].split(";")[4:6])
    proj = LocalProjection(52.52, 13.40)
    assert (first["x"], first["y"]) == proj.point(lat, lon)

    join = (
        "--source",
        "fleet",
        "--r-streams",
        "bus",
        "--s-streams",
        "taxi",
        "--theta",
        50,
        "--window-s",
        2,
    )
    run(cfg, "join-stream", *join)
    pairs = delta.read(spark, JOIN_RESULTS, settings.lake_root).select("r_seq", "s_seq").collect()
    assert pairs
    for p in pairs:  # every pair is within 50 m on the ground (geodesic), up to the projection's bound
        (lat_r, lon_r), (lat_s, lon_s) = (
            [float(v.replace(",", ".")) for v in raw[rows[seq]["line_no"] - 1].split(";")[4:6]]
            for seq in (p["r_seq"], p["s_seq"])
        )
        assert vincenty_m(lat_r, lon_r, lat_s, lon_s) <= 50 * (1 + proj.error_bound(1_000))
        assert abs(rows[p["r_seq"]]["event_ts"] - rows[p["s_seq"]]["event_ts"]) <= 2_000_000
    run(cfg, "aggregate-stream", "--source", "fleet", "--aggregate", "avg")
    windows = delta.read(spark, AGG_RESULTS, settings.lake_root)
    assert windows.count() > 0 and windows.where("value IS NULL").isEmpty()
    assert 10 < windows.agg(F.min("value")).first()[0] < windows.agg(F.max("value")).first()[0] < 30  # °C
