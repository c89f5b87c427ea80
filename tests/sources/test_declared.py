"""Declared sources: the declaration's checks, the reader's per-line definition, and its vectorised path.

- A declaration that cannot work fails when the settings load, naming the key.
- Every quarantined value names its column; times in every unit and ISO 8601 with offsets convert
  exactly; JSON lines read nested fields.
- The vectorised CSV and JSON paths give the same rows, reasons, details and counts as the
  per-line definition on any line, including values at the edge of their canonical forms, JSON
  that Arrow and Python read differently, and groups of lines Arrow refuses (Hypothesis).
- A declaration that does not match a file (a missing column, a field in another unit) is caught
  from the file's first lines, before anything is written.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.config import load_settings
from outoforder.errors import ConfigError, InputError
from outoforder.sources.declaration import DEFAULT_PLAUSIBLE_US, parse_declaration
from outoforder.sources.declared import DeclaredReader, make_reader
from outoforder.sources.declared_checks import check_fields, check_sample, header_fields
from outoforder.sources.readers import Reject
from tests.sources.test_line_parser import PerLine, parse_all

EXAMPLES = int(os.environ.get("OOO_FUZZ_EXAMPLES", "150"))
PLANT = {
    "format": "csv",
    "stream": {"column": "line", "values": ["press", "oven", "0"]},
    "key": "sensor",
    "event_time": {"column": "ts", "unit": "ms"},
    "arrival": {"column": "received", "unit": "iso8601"},
    "values": {"value": "temp", "x": "pos"},
    "attrs": ["site"],
}
HEADER = "line,sensor,ts,received,temp,pos,site"


def plant(**changes: object) -> DeclaredReader:
    decl = parse_declaration("plant", {**PLANT, **changes})
    return DeclaredReader(decl, header_fields(decl, HEADER))


def reject(reader: DeclaredReader, text: str) -> tuple[str, str]:
    with pytest.raises(Reject) as e:
        reader.parse(text)
    return e.value.reason, e.value.detail


def test_a_csv_line_becomes_a_row():
    row = plant().parse("press,s7,1700000000123,2023-11-14T23:13:21.5+01:00,21.5,,north")
    assert (row.stream, row.key, row.event_us) == ("press", "s7", 1_700_000_000_123_000)
    assert row.arrival_us == 1_700_000_001_500_000
    assert (row.value, row.x, row.y) == (21.5, None, None)
    assert dict(row.attrs) == {"site": "north"}


@pytest.mark.parametrize(
    ("unit", "text", "us"),
    [("s", "1700000000.25", 1_700_000_000_250_000), ("ms", "-1", -1000), ("us", "5", 5),
     ("ns", "-1501", -2), ("ns", "1999", 1), ("s", "1e3", 1_000_000_000)],
)  # fmt: skip
def test_epoch_units_convert_exactly_floored_to_the_microsecond(unit, text, us):
    reader = plant(event_time={"column": "ts", "unit": unit})
    assert reader.parse(f"oven,k,{text},2100-01-01T00:00:00Z,1,2,s").event_us == us


def test_every_bad_value_names_its_column():
    r = plant()
    good = "press,s7,1700000000123,2023-11-14T22:13:21Z,21.5,3,north"
    cases = {
        "press,s7,yesterday,2023-11-14T22:13:21Z,21.5,3,north": ("not_numeric", "column 'ts'"),
        "press,s7,1700000000123,2023-11-14 22:13:21,21.5,3,north": ("bad_timestamp", "column 'received'"),
        "press,s7,1700000000123,tomorrow,21.5,3,north": ("bad_timestamp", "column 'received'"),
        "press,s7,1700000000123,2023-11-14T22:13:21Z,warm,3,north": ("not_numeric", "column 'temp'"),
        "press,s7,1700000000123,2023-11-14T22:13:21Z,inf,3,north": ("non_finite_value", "column 'temp'"),
        "press,,1700000000123,2023-11-14T22:13:21Z,21.5,3,north": ("null_key", "column 'sensor'"),
        ",s7,1700000000123,2023-11-14T22:13:21Z,21.5,3,north": ("null_stream", "column 'line'"),
        "pres,s7,1700000000123,2023-11-14T22:13:21Z,21.5,3,north": ("unknown_stream", "column 'line'"),
        "press,s7,,2023-11-14T22:13:21Z,21.5,3,north": ("null_timestamp", "column 'ts'"),
        "press,s7,1e30,2023-11-14T22:13:21Z,21.5,3,north": ("not_numeric", "column 'ts'"),
    }
    r.parse(good)
    for text, (reason, column) in cases.items():
        got = reject(r, text)
        assert got[0] == reason and got[1].startswith(column), (text, got)
    assert reject(r, "press,s7")[0] == "column_count"


def test_a_declared_timezone_applies_to_times_without_an_offset():
    r = plant(arrival={"column": "received", "unit": "iso8601", "timezone": "Europe/Paris"})
    row = r.parse("press,s7,0,2023-07-01 12:00:00,1,1,n")
    assert row.arrival_us == 1_688_205_600_000_000  # 10:00 UTC (summer time)
    assert r.parse("press,s7,0,2023-07-01T12:00:00Z,1,1,n").arrival_us == 1_688_212_800_000_000


def test_null_values_and_every_other_column_as_attributes():
    r = plant(null_values=["", "NA"], attrs=["*"])
    row = r.parse("press,s7,5,1970-01-01T00:00:00Z,NA,NA,north")
    assert (row.value, row.x) == (None, None)
    assert dict(row.attrs) == {"site": "north"}
    assert reject(r, "press,NA,5,1970-01-01T00:00:00Z,1,1,north")[0] == "null_key"


def test_json_lines_read_fields_by_name_or_dotted_path():
    decl = parse_declaration(
        "meters",
        {"format": "jsonl", "stream": "meters", "key": "id", "event_time": {"column": "t", "unit": "s"},
         "values": {"value": "reading.kwh"}, "attrs": ["reading.phase", "tags"]},
    )  # fmt: skip
    r = DeclaredReader(decl)
    row = r.parse(json.dumps({"id": 17, "t": 1.5, "reading": {"kwh": 3, "phase": "L1"}, "tags": ["a"]}))
    assert (row.key, row.event_us, row.value) == ("17", 1_500_000, 3.0)
    assert dict(row.attrs) == {"reading.phase": "L1", "tags": '["a"]'}
    assert reject(r, "[1, 2]")[0] == "not_json"
    assert reject(r, "{oops")[0] == "not_json"
    assert reject(r, json.dumps({"id": 1, "t": True}))[:2] == ("not_numeric", "column 't': 'true'")
    assert reject(r, json.dumps({"id": 1, "t": 1, "reading": {"kwh": "x"}}))[0] == "not_numeric"
    assert reject(r, json.dumps({"t": 1}))[0] == "null_key"


def test_the_reader_travels_to_spark_tasks_as_one_string():
    r = plant(null_values=["NA", ""])
    again = make_reader(r.spec())
    assert isinstance(again, DeclaredReader) and again.decl == r.decl and again.fields == r.fields
    text = "press,s7,5,1970-01-01T00:00:00Z,NA,1,north"
    assert again.parse(text) == r.parse(text)


@pytest.mark.parametrize(
    ("table", "fragment"),
    [({"format": "xml"}, "sources.s.format"), ({**PLANT, "key": ""}, "sources.s.key"),
     ({**PLANT, "event_time": {"column": "ts", "unit": "minutes"}}, "sources.s.event_time.unit"),
     ({**PLANT, "values": {"score": "temp"}}, "sources.s.values"),
     ({**PLANT, "stream": {"col": "x"}}, "sources.s.stream"),
     ({**PLANT, "stream": {"column": "x"}}, "sources.s.stream"),
     ({**PLANT, "stream": {"column": "x", "values": []}}, "sources.s.stream.values"),
     ({**PLANT, "header": False}, "sources.s.columns"),
     ({**PLANT, "delimiter": ";;"}, "sources.s.delimiter"),
     ({**PLANT, "arrival": {"column": "r", "unit": "ms", "timezone": "UTC"}}, "sources.s.arrival.timezone"),
     ({**PLANT, "colour": "red"}, "sources.s.colour")],
)  # fmt: skip
def test_a_declaration_that_cannot_work_fails_naming_its_key(table, fragment):
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        parse_declaration("s", table)


def test_declarations_come_from_the_settings_file(tmp_path):
    cfg = tmp_path / "mine.toml"
    cfg.write_text(
        '[sources.plant]\nformat = "csv"\nstream = "sensors"\nkey = "sensor"\n'
        'event_time = { column = "ts", unit = "ms" }\nplausible_event_us = [0, 10]\n'
    )
    s = load_settings(cfg, env={})
    assert s.sources["plant"].event_time.unit == "ms"
    assert s.ingest.plausible_range("plant") == (0, 10)
    cfg.write_text(cfg.read_text().replace("plausible_event_us = [0, 10]\n", ""))
    assert load_settings(cfg, env={}).ingest.plausible_range("plant") == DEFAULT_PLAUSIBLE_US
    cfg.write_text('[sources.plant]\nformat = "csv"\n')
    with pytest.raises(ConfigError, match=r"sources\.plant\.key"):
        load_settings(cfg, env={})
    cfg.write_text(
        '[sources.ooo]\nformat = "csv"\nstream = "s"\nkey = "k"\nevent_time = {column="t", unit="s"}\n'
    )
    with pytest.raises(ConfigError, match="built-in reader"):
        load_settings(cfg, env={})


def test_a_file_that_does_not_fit_the_declaration_is_caught_from_its_first_lines():
    decl = parse_declaration("plant", PLANT)
    with pytest.raises(InputError, match=r"no column 'received'.*its columns: line, sensor, ts"):
        check_fields(decl, header_fields(decl, "line,sensor,ts,temp,pos,site"), "f.csv")
    r = plant()
    iso_in_ms = [f"press,s{i},2023-11-14T22:13:2{i}Z,2023-11-14T22:13:21Z,1,1,n" for i in range(5)]
    with pytest.raises(InputError, match=r"none of the first 5 records fits.*column 'ts'"):
        check_sample(r, iso_in_ms, "f.csv")
    seconds = [f"press,s{i},1700000000{i},2023-11-14T22:13:21Z,1,1,n" for i in range(3)]
    with pytest.raises(InputError, match=r"outside .* \(is the unit 'ms' right\?\)"):
        check_sample(r, seconds, "f.csv")  # epoch seconds read as milliseconds: 1970
    check_sample(r, [*iso_in_ms, "press,s7,1700000000123,2023-11-14T22:13:21Z,1,1,n"], "f.csv")  # one fits


# --- the vectorised path against the per-line definition ---------------------------------------

EDGE = ["007", "+7", "-0", "0", "", " 5", "5 ", "1e3", "1.5", "1" * 18, "1" * 19, "-9" + "9" * 17,
        "NA", "nan", "inf", "1e400", "1_0", "٣", ".5", "5.", "1E-3", "2023-11-14T22:13:21Z",
        "2023-11-14T22:13:21.123456+05:30", "2023-11-14 22:13:21", "2023-02-30T00:00:00Z",
        "2023-11-14T24:00:00Z", "2023-11-14T22:13:60Z", "2023-11-14T22:13:21.1234567Z", '"q"', "a b",
        " a"]  # fmt: skip
ANY_TIME = (-(2**63), 2**63 - 1)
UNITS = ["s", "ms", "us", "ns", "iso8601"]


def assert_paths_agree(reader: DeclaredReader, content: bytes) -> None:
    """The vectorised and per-line paths give the same rows, rejects and counts."""
    fast = parse_all(reader, content, ANY_TIME)
    slow = parse_all(PerLine(reader), content, ANY_TIME)
    assert fast[0].to_pylist() == slow[0].to_pylist()
    assert fast[1].to_pylist() == slow[1].to_pylist()
    assert fast[2] == slow[2]


@st.composite
def csv_line(draw: st.DrawFn) -> bytes:
    good = ["press", "s7", "1700000000123", "2023-11-14T22:13:21Z", "21.5", "3", "north"]
    fields = list(good)
    for i in draw(st.lists(st.integers(0, len(fields) - 1), max_size=3)):
        fields[i] = draw(st.sampled_from(EDGE) | st.text(alphabet="0123456789.-+eE:TZ ", max_size=12))
    if draw(st.integers(0, 9)) == 0:
        fields = fields[: draw(st.integers(0, len(fields)))]
    return ",".join(fields).encode()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(UNITS), st.sampled_from(UNITS), st.booleans(), st.data())
def test_the_vectorised_csv_path_equals_the_per_line_definition(unit, arrival_unit, all_attrs, data):
    reader = plant(
        event_time={"column": "ts", "unit": unit},
        arrival={"column": "received", "unit": arrival_unit},
        null_values=["", "NA"],
        attrs=["*"] if all_attrs else ["site"],
    )
    lines = [HEADER.encode(), *data.draw(st.lists(csv_line(), max_size=25))]
    if len(lines) > 1 and data.draw(st.booleans()):
        lines.append(lines[data.draw(st.integers(1, len(lines) - 1))])  # an exact duplicate
    content = b"\n".join(lines) + b"\n"
    assert_paths_agree(reader, content)


JSON_EDGE = [None, True, False, 0, 7, -5, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), 10**19, 1.5, -0.0, 1e300,
             1e-7, float("nan"), float("inf"), 1700000000.123, "", "NA", " 5", "7", "1.50", "x y", "press",
             "2023-11-14T22:13:21Z", "2023-11-14", "caf\u00e9", 'a"b', "a\\b", {"a": 1}, [1], {}]  # fmt: skip
GOOD_JSON = {"line": "press", "sensor": "s7", "ts": 1700000000123, "received": "2023-11-14T22:13:21Z",
             "temp": 21.5, "pos": 3, "site": "north"}  # fmt: skip


@st.composite
def json_line(draw: st.DrawFn, nested: bool) -> bytes:
    obj: dict[str, object] = dict(GOOD_JSON)
    for name in draw(st.lists(st.sampled_from(list(GOOD_JSON)), max_size=3)):
        if draw(st.integers(0, 5)) == 0:
            obj.pop(name, None)
            continue
        obj[name] = draw(
            st.sampled_from(JSON_EDGE) | st.sampled_from(EDGE) | st.integers() | st.floats()
            | st.text(alphabet="0123456789.-+eE:TZ ", max_size=12)
        )  # fmt: skip
    if nested and "temp" in obj:
        obj["m"] = {"temp": obj.pop("temp"), "unit": "C"}
        if draw(st.integers(0, 9)) == 0:
            obj["m.temp"] = 1.0  # a literal key that a dotted path must not be confused with
    text = json.dumps(obj, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    damage = draw(st.integers(0, 14))
    if damage == 0:
        text = text[: draw(st.integers(0, len(text)))]  # cut short
    elif damage == 1:
        text += text  # two objects on one line
    elif damage == 2:
        text = '{"sensor":"s0",' + text[1:]  # a key given twice
    elif damage == 3:
        text = f"[{text}]"
    elif damage == 4:
        text = f" {text}"
    return text.encode()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(UNITS), st.sampled_from(UNITS), st.booleans(), st.sampled_from([7, 64]), st.data())
def test_the_vectorised_json_path_equals_the_per_line_definition(unit, arrival_unit, nested, batch, data):
    from unittest import mock

    from outoforder.sources import arrow_json
    from outoforder.sources.lines import read_line_batches
    from outoforder.sources.parsing import LineParser

    decl = parse_declaration(
        "plant",
        {**PLANT, "format": "jsonl", "event_time": {"column": "ts", "unit": unit},
         "arrival": {"column": "received", "unit": arrival_unit}, "null_values": ["", "NA"],
         "values": {"value": "m.temp" if nested else "temp", "x": "pos"}, "attrs": ["site", "line"]},
    )  # fmt: skip
    reader = DeclaredReader(decl, decl.columns_used())
    lines = data.draw(st.lists(json_line(nested), max_size=40))
    if lines and data.draw(st.booleans()):
        lines += lines[: data.draw(st.integers(1, len(lines)))] * 3  # repeats: groups that read whole
    content = b"\n".join(lines) + b"\n"

    def parse(r: object) -> tuple[list, list, dict]:
        parser = LineParser(r, ANY_TIME)
        acc, rej, counts = [], [], {}
        for b in read_line_batches(io.BytesIO(content), max_line_bytes=1 << 20, batch_lines=batch):
            out = parser.parse(b)
            acc += out.accepted.to_pylist()
            rej += out.quarantined.to_pylist()
            for k, v in vars(out.counts).items():
                counts[k] = counts.get(k, 0) + v
        return acc, rej, counts

    with mock.patch.object(arrow_json, "JSON_MIN_LINES", 2), mock.patch.object(arrow_json, "JSON_SAMPLE", 5):
        fast = parse(reader)
    slow = parse(PerLine(reader))
    assert fast[0] == slow[0]
    assert fast[1] == slow[1]
    assert fast[2] == slow[2]


def test_the_vectorised_json_path_reads_plain_objects_in_bulk():
    import pyarrow as pa

    decl = parse_declaration("plant", {**PLANT, "format": "jsonl", "values": {"value": "m.temp"}})
    reader = DeclaredReader(decl, decl.columns_used())
    obj = {**GOOD_JSON, "ts": 1700000000123, "m": {"temp": 21}}
    texts = pa.array([json.dumps(obj), json.dumps({**obj, "m": {"temp": None}})], pa.large_string())
    ok, cols = reader.parse_fast(texts)
    assert ok.tolist() == [True, True]
    assert cols["value"].to_pylist() == [21.0, None]
    assert cols["event_ts"].to_pylist() == [1700000000123000] * 2
    floats = pa.array([json.dumps({**obj, "ts": 1.5})] * 2, pa.large_string())
    assert reader.parse_fast(floats)[0].tolist() == [False, False]  # a float's exact decimal: per line


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_constant_stream_is_read_in_bulk(fmt):
    # the bulk path once built its columns out of the staged rows' order when the stream was a constant
    decl = parse_declaration("plant", {**PLANT, "format": fmt, "stream": "press", "header": False,
                                       "columns": HEADER.split(",")} if fmt == "csv" else
                             {**PLANT, "format": fmt, "stream": "press"})  # fmt: skip
    reader = DeclaredReader(decl, decl.columns or decl.columns_used())
    obj = {"sensor": "s7", "ts": 1700000000123, "received": "2023-11-14T22:13:21Z", "temp": 21.5}
    line = "x,s7,1700000000123,2023-11-14T22:13:21Z,21.5,3,north" if fmt == "csv" else json.dumps(obj)
    accepted, rejected = parse_all(reader, f"{line}\n{line.replace('s7', 's8')}\n".encode(), ANY_TIME)[:2]
    assert accepted.column("stream").to_pylist() == ["press", "press"]
    assert rejected.num_rows == 0


def test_the_vectorised_path_takes_canonical_lines():
    reader = plant()
    good = "press,s7,1700000000123,2023-11-14T22:13:21Z,21.5,3,north"
    import pyarrow as pa

    ok, cols = reader.parse_fast(pa.array([good, good.replace("21.5", "")], pa.large_string()))
    assert ok.tolist() == [True, True]
    assert cols["value"].to_pylist() == [21.5, None]


def test_the_settings_know_every_built_in_reader_name():
    from outoforder.config import BUILTIN_READERS
    from outoforder.sources.readers import READERS

    assert set(BUILTIN_READERS) == set(READERS)


# --- the European layout: decimal commas, positions in degrees, value ranges, clock skew ----------

FLEET = {
    "format": "csv",
    "delimiter": ";",
    "decimal": ",",
    "thousands": ".",
    "stream": "fleet",
    "key": "vehicle",
    "event_time": {"column": "seen", "unit": "iso8601"},
    "arrival": {"column": "recv_ms", "unit": "ms"},
    "values": {"lat": "lat", "lon": "lon", "value": "temp_c"},
    "origin": [52.52, 13.40],
    "ranges": {"value": [-40, 60]},
    "max_clock_skew_s": 5,
}
FLEET_HEADER = "vehicle;seen;recv_ms;lat;lon;temp_c"
FLEET_LINE = "v1;2024-03-01T10:00:00+01:00;1709283600250;52,53;13,40;3,99"


def fleet(**changes: object) -> DeclaredReader:
    decl = parse_declaration("fleet", {**FLEET, **changes})
    return DeclaredReader(decl, header_fields(decl, FLEET_HEADER))


def test_decimal_commas_and_thousands_separators_read_as_declared():
    row = fleet().parse(FLEET_LINE)
    assert row.value == 3.99
    assert fleet(ranges={}).parse(FLEET_LINE.replace(";3,99", ";1.234,5")).value == 1234.5
    assert fleet(ranges={}).parse(FLEET_LINE.replace(";3,99", ";-1.234.567")).value == -1234567.0
    # a dot is a thousands separator here: a number written the other way round is not guessed
    assert reject(fleet(), FLEET_LINE.replace(";3,99", ";3.99")) == (
        "not_numeric",
        "column 'temp_c': '3.99' (declared decimal ',', thousands '.')",
    )
    assert reject(fleet(), FLEET_LINE.replace(";3,99", ";1.23,4"))[0] == "not_numeric"
    assert reject(fleet(), FLEET_LINE.replace(";3,99", ";inf"))[0] == "non_finite_value"
    plain = fleet(decimal=".", thousands="")  # the default: Python's own form
    assert reject(plain, FLEET_LINE)[0] == "not_numeric"


def test_positions_in_degrees_become_metres_about_the_origin():
    row = fleet().parse(FLEET_LINE)
    assert row.x == 0.0 and 1112 < row.y < 1113  # 0.01° of latitude north of the origin
    east = fleet().parse(FLEET_LINE.replace("52,53;13,40", "52,52;13,41"))
    assert 678 < east.x < 679 and east.y == 0.0  # 0.01° of longitude at 52.52° N
    no_lon = fleet().parse(FLEET_LINE.replace(";13,40;", ";;"))
    assert (no_lon.x, no_lon.y) == (None, None)
    assert reject(fleet(), FLEET_LINE.replace("52,53", "91,5")) == (
        "out_of_range",
        "column 'lat': 91.5 is outside [-90, 90]",
    )
    assert reject(fleet(), FLEET_LINE.replace("13,40", "-181"))[0] == "out_of_range"
    narrowed = fleet(ranges={"lat": [52, 53]})
    south = FLEET_LINE.replace("52,53", "51,9")
    assert reject(narrowed, south)[1] == "column 'lat': 51.9 is outside [52, 53]"


def test_declared_value_ranges_quarantine_out_of_range():
    assert reject(fleet(), FLEET_LINE.replace(";3,99", ";61")) == (
        "out_of_range",
        "column 'temp_c': 61 is outside [-40, 60]",
    )
    assert fleet().parse(FLEET_LINE.replace(";3,99", ";60")).value == 60.0


def test_an_arrival_long_before_its_event_time_is_quarantined():
    two_years_early = FLEET_LINE.replace("1709283600250", "1646125200000")
    reason, detail = reject(fleet(), two_years_early)
    assert reason == "arrival_before_event"
    assert detail.startswith("column 'recv_ms': 6.31584e+07 s before the event time")
    a_little_early = FLEET_LINE.replace("1709283600250", "1709283596000")  # 4 s: within the skew
    assert fleet().parse(a_little_early).arrival_us == 1_709_283_596_000_000
    assert reject(fleet(max_clock_skew_s=3), a_little_early)[0] == "arrival_before_event"


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [({"origin": None}, "sources.s.origin"), ({"origin": [95, 0]}, "sources.s.origin"),
     ({"values": {"lat": "lat", "value": "temp_c"}}, "sources.s.values"),
     ({"values": {"lat": "lat", "lon": "lon", "x": "lon"}}, "sources.s.values"),
     ({"values": {"value": "temp_c"}, "ranges": {}}, "sources.s.origin"),
     ({"ranges": {"z": [0, 1]}}, "sources.s.ranges.z"),
     ({"ranges": {"value": [2, 1]}}, "sources.s.ranges.value"),
     ({"ranges": {"value": [0, float("inf")]}}, "sources.s.ranges.value"),
     ({"decimal": ";"}, "sources.s.decimal"), ({"thousands": ","}, "sources.s.thousands"),
     ({"max_clock_skew_s": -1}, "sources.s.max_clock_skew_s")],
)  # fmt: skip
def test_a_european_declaration_that_cannot_work_fails_naming_its_key(changes, fragment):
    table = {**FLEET, **changes}
    table = {k: v for k, v in table.items() if v is not None}
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        parse_declaration("s", table)


FLEET_EDGE = ["3,99", "1.234,5", "1.23,4", "3.99", "-0,5", "+2", "1e3", "1,5e2", "12.345.678", "0", "",
              "NA", "inf", "nan", "91,5", "-90", "180", "180,0001", "52", "13,4", "61", "-40", ",5",
              "5,"]  # fmt: skip


@st.composite
def fleet_line(draw: st.DrawFn) -> bytes:
    fields = FLEET_LINE.split(";")
    for i in draw(st.lists(st.integers(2, len(fields) - 1), max_size=3)):
        if i == 2:  # the arrival: early, late, or not a number
            fields[i] = draw(st.sampled_from(["1709283590000", "1709283595000", "1709283700000", "x"]))
        else:
            fields[i] = draw(st.sampled_from(FLEET_EDGE) | st.text(alphabet="0123456789.,-e", max_size=9))
    return ";".join(fields).encode()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(",", "."), (",", ""), (".", ","), (",", " ")]), st.data())
def test_the_vectorised_path_equals_the_per_line_definition_with_separators_and_positions(seps, data):
    decimal, thousands = seps
    reader = fleet(decimal=decimal, thousands=thousands, null_values=["", "NA"])
    lines = [FLEET_HEADER.encode(), *data.draw(st.lists(fleet_line(), max_size=25))]
    content = b"\n".join(lines) + b"\n"
    assert_paths_agree(reader, content)


def test_the_vectorised_path_reads_the_european_layout_in_bulk():
    reader = fleet()
    lines = [FLEET_LINE.replace("v1", f"v{i}").replace(";3,99", f";{i},5") for i in range(50)]
    ok, cols = reader.parse_fast(pa.array(lines, pa.large_string()))
    assert ok.all()
    assert cols["value"].to_pylist() == [i + 0.5 for i in range(50)]
    assert cols["y"].to_pylist() == [reader.parse(lines[0]).y] * 50


# --- any declaration x any file: a clear error or a result, lines conserved, never a traceback -----

OPTIONAL = {  # key: (values that work, values refused)
    "decimal": ([".", ","], [";", "x"]),
    "thousands": (["", " ", ".", ",", "'"], ["ab"]),
    "origin": ([[52.5, 13.4]], [[95, 0], [0, 181], "x", [1]]),  # lat and lon get a working one anyway
    "ranges": ([{"value": [0, 10]}, {"lat": [50, 55]}], [{"value": [10, 0]}, {"zz": [0, 1]}, []]),
    "max_clock_skew_s": ([0, 300, 0.5], [-1, float("nan"), "x", True]),
    "null_values": ([["", "NA"], [""]], [[1]]),
}
FIELD_EDGE = ["1", "-2,5", "3.5", "1.234,5", "1 234,5", "1'234.5", "52,52", "13.4", "91", "-181", "NA", "",
              "1700000000123", "2024-03-01T10:00:00+01:00", "1e3", "nan", "x"]  # fmt: skip


VALUE_MAPS = (  # (maps that work, maps refused)
    [
        {"value": "v"},
        {"lat": "la", "lon": "lo", "value": "v"},
        {"lat": "la", "lon": "lo"},
        {"value": "la"},
        {},
    ],
    [{"lat": "la"}, {"x": "la", "lat": "lo"}],
)
ARRIVALS = ["order", {"column": "a", "unit": "ms"}, {"column": "a", "unit": "iso8601"}]


def error_of(fn: Callable[..., object], *args: object) -> str | None:
    """The message of the clear error ``fn`` raises (ConfigError, InputError), or None."""
    try:
        fn(*args)
    except (ConfigError, InputError) as e:
        return str(e)
    return None


@st.composite
def declaration(draw: st.DrawFn) -> dict[str, object]:
    raw: dict[str, object] = {
        "format": "csv",
        "delimiter": draw(st.sampled_from([",", ";", "|"])),
        "stream": "s",
        "key": "k",
        "event_time": {"column": "t", "unit": draw(st.sampled_from(UNITS))},
        "arrival": draw(st.sampled_from(ARRIVALS)),
        "values": draw(st.sampled_from(VALUE_MAPS[0] if draw(st.integers(0, 7)) else VALUE_MAPS[1])),
    }
    for key, (works, refused) in OPTIONAL.items():
        if draw(st.booleans()):  # mostly a value that works, so most examples reach the file
            raw[key] = draw(st.sampled_from(works if draw(st.integers(0, 7)) else refused))
    values = raw["values"]
    if "lat" in values and "origin" not in raw:
        raw["origin"] = [52.5, 13.4]
    elif "lat" not in values and raw.get("origin") == [52.5, 13.4]:
        del raw["origin"]
    if (
        isinstance(raw.get("ranges"), dict)
        and not set(raw["ranges"]) <= set(values)
        and draw(st.integers(0, 3))
    ):
        raw["ranges"] = {name: [0, 60] for name in values}  # mostly ranges of fields it maps
    return raw


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(declaration(), st.data())
def test_any_declaration_and_file_give_a_clear_error_or_conserved_lines(raw, data):
    refused = error_of(parse_declaration, "any", raw)
    if refused is not None:
        assert refused.startswith("sources.any")
        return
    decl = parse_declaration("any", raw)
    d = decl.delimiter
    header = d.join(["k", "t", "a", "v", "la", "lo"])
    good = ["k1", "1700000000123", "1700000000500", "2,5", "52,52", "13,40"]
    lines = [header]
    for _ in range(data.draw(st.integers(0, 12))):
        fields = list(good)
        for i in data.draw(st.lists(st.integers(0, 5), max_size=3)):
            fields[i] = data.draw(st.sampled_from(FIELD_EDGE))
        lines.append(d.join(fields))
    reader = DeclaredReader(decl, header_fields(decl, header))
    stopped = error_of(check_sample, reader, lines[1:], "any.csv")
    assert stopped is None or "fix the declaration [sources.any]" in stopped
    accepted, rejected, counts, _ = parse_all(
        reader, ("\n".join(lines) + "\n").encode(), decl.plausible_event_us
    )
    assert counts["lines"] == len(lines)
    assert counts["header_lines"] + counts["blank_lines"] + counts["accepted"] + counts["quarantined"] == len(
        lines
    )
    assert accepted.num_rows == counts["accepted"] and rejected.num_rows == counts["quarantined"]
