"""Bad input never crashes a reader and is never lost: read = accepted + quarantined."""

import gzip
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outoforder.sources.declared import make_reader
from outoforder.sources.parsing import read_file

GOOD = "61,10634757171903878,27058,-130,-110,178392,2700132,3054,-9332,-1892,4149,-8999,1339"


def run(tmp_path, content: bytes, reader="debs2013", name="f.csv", **kw):
    path = tmp_path / name
    path.write_bytes(content)
    batches = list(
        read_file(path, make_reader(reader), plausible_us=kw.pop("plausible", (10**10, 16 * 10**9)), **kw)
    )
    counts = batches[-1].counts
    accepted = sum(b.accepted.num_rows for b in batches)
    rejects = [r for b in batches for r in b.quarantined.to_pylist()]
    assert accepted == counts.accepted
    assert len(rejects) == counts.quarantined
    assert counts.lines == counts.header_lines + counts.blank_lines + counts.accepted + counts.quarantined
    return accepted, rejects, counts


def reasons(rejects):
    return sorted(r["reason"] for r in rejects)


def test_each_kind_of_bad_row_is_quarantined_with_its_reason(tmp_path):
    bad = [
        GOOD,
        "61,10634757171903878,27058",  # column_count
        GOOD.replace("27058", "x27"),  # not_numeric
        ",10634757171903878" + GOOD[len("61,10634757171903878") :],  # null_key
        "61," + GOOD[len("61,10634757171903878,") :].join(["", ""]),  # column_count too
        "61,," + GOOD[len("61,10634757171903878,") :],  # null_timestamp
        GOOD.replace("10634757171903878", "99"),  # implausible_timestamp
        GOOD.replace("61,", "999,", 1),  # unknown_sensor
        GOOD,  # duplicate_row
        "",  # blank: not a row
    ]
    acc, rej, counts = run(tmp_path, "\n".join(bad).encode() + b"\n")
    assert acc == 1
    assert reasons(rej) == sorted(
        [
            "column_count",
            "not_numeric",
            "null_key",
            "column_count",
            "null_timestamp",
            "implausible_timestamp",
            "unknown_sensor",
            "duplicate_row",
        ]
    )
    assert counts.blank_lines == 1
    assert all(r["raw_line"] is not None and r["line_no"] >= 1 for r in rej)


def test_non_finite_values_are_quarantined(tmp_path):
    row = ("x;" * 26).rstrip(";")
    content = (
        b'"S.Message.received.time"'
        + b';"c"' * 26
        + b"\n"
        + f'"t";1415624021690;nan;"dev_1";0;"d";1415624019862;{row[4:]}'.encode()
        + b"\n"
    )
    acc, rej, _ = run(tmp_path, content, reader="ooo", plausible=(0, 2**62))
    assert acc == 0
    assert reasons(rej) in (["non_finite_value"], ["column_count"])


def test_wrong_encoding_is_quarantined_and_the_rest_survives(tmp_path):
    content = (
        (GOOD + "\n").encode() + b"\xff\xfe\x00 latin-1 \xe9\n" + GOOD.replace("178392", "1").encode() + b"\n"
    )
    acc, rej, _ = run(tmp_path, content)
    assert acc == 2
    assert reasons(rej) == ["encoding"]
    assert "\\xff" in rej[0]["raw_line"]


def test_huge_line_is_quarantined_without_reading_it_whole(tmp_path):
    content = (GOOD + "\n").encode() + b"9" * 5000 + b"\n" + GOOD.replace("178392", "2").encode() + b"\n"
    acc, rej, _ = run(tmp_path, content, max_line_bytes=1000)
    assert acc == 2
    assert reasons(rej) == ["line_too_long"]
    assert "5001 bytes" in rej[0]["detail"] or "5000 bytes" in rej[0]["detail"]


def _gz(text: str) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as fh:
        fh.write(text.encode())
    return buf.getvalue()


def test_truncated_gzip_keeps_what_was_readable_and_records_the_break(tmp_path):
    lines = [GOOD.replace("178392", str(i)) for i in range(2000)]
    data = _gz("\n".join(lines) + "\n")
    acc, rej, _ = run(tmp_path, data[: len(data) // 2], name="cut.csv.gz")
    assert 0 < acc < 2000
    assert reasons(rej) == ["corrupt_file"]
    assert "EOFError" in rej[0]["detail"] or "Error" in rej[0]["detail"]


def test_corrupt_gzip_body_is_recorded_not_raised(tmp_path):
    data = bytearray(_gz("\n".join([GOOD] * 10)))
    data[20:40] = b"\x00" * 20
    acc, rej, _ = run(tmp_path, bytes(data), name="bad.gz")
    assert reasons(rej) == ["corrupt_file"] or acc + len(rej) >= 1


def test_not_gzip_at_all_is_read_as_text(tmp_path):
    acc, rej, _ = run(tmp_path, (GOOD + "\n").encode(), name="plain.gz")
    assert (acc, rej) == (1, [])


def test_header_only_on_the_first_line(tmp_path):
    content = f"sensor_id,time_stamp,x\n{GOOD}\nsensor_id,time_stamp,x\n".encode()
    acc, rej, counts = run(tmp_path, content)
    assert counts.header_lines == 1 and acc == 1
    assert reasons(rej) == ["column_count"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=3000), st.sampled_from(["debs2013", "ooo", "debs2015"]), st.booleans())
def test_random_bytes_never_crash_and_every_line_is_accounted_for(tmp_path, blob, reader, zipped):
    content = _gz(blob.decode("latin-1")) if zipped else blob
    run(
        tmp_path, content, reader=reader, name="fuzz.bin", plausible=(-(2**63), 2**63 - 1), max_line_bytes=500
    )


TAXI = (
    "07290D3599E7A0D62097A346EFCC1FB5,E7750A37CAB07D0DFF0AF7E3573AC141,2013-01-01 00:00:00,"
    "2013-01-01 00:02:00,120,0.44,-73.956528,40.716976,-73.962440,40.715008,CSH,3.50,0.50,"
    "0.50,0.00,0.00,4.50"
)
TAXI_RANGE = (946_684_800_000_000, 4_102_444_800_000_000)


def test_a_byte_order_mark_does_not_leak_into_the_first_key(tmp_path):
    _, rej, _ = run(tmp_path, ("\ufeff" + TAXI + "\n").encode(), reader="debs2015", plausible=TAXI_RANGE)
    batches = list(read_file(tmp_path / "f.csv", make_reader("debs2015"), plausible_us=TAXI_RANGE))
    assert rej == []
    assert batches[-1].accepted.column("key").to_pylist() == ["07290D3599E7A0D62097A346EFCC1FB5"]
    acc, rej, _ = run(tmp_path, ("\ufeff" + GOOD + "\n").encode())
    assert (acc, rej) == (1, [])


def test_quoted_taxi_fields_and_one_trailing_delimiter_are_accepted(tmp_path):
    quoted = ",".join(f'"{v}"' for v in TAXI.split(","))
    content = f"{quoted}\n{TAXI.replace('120', '121')},\n".encode()
    acc, rej, _ = run(tmp_path, content, reader="debs2015", plausible=TAXI_RANGE)
    assert (acc, rej) == (2, [])
    acc, rej, _ = run(tmp_path, (GOOD + ",\n").encode())
    assert (acc, rej) == (1, [])


def test_numbers_beyond_64_bits_are_quarantined_not_raised(tmp_path):
    huge = "9" * 400
    content = "\n".join(
        [
            GOOD.replace("27058", huge),  # position far beyond float range
            GOOD + "," + huge,  # arrival column beyond int64
            GOOD.replace("27058", "1e400"),  # overflows to inf: not numeric/finite
        ]
    ).encode()
    acc, rej, _ = run(tmp_path, content)
    assert acc == 0
    assert reasons(rej) == ["not_numeric", "not_numeric", "not_numeric"]


def test_an_arrival_time_outside_the_plausible_range_is_quarantined(tmp_path):
    acc, rej, _ = run(tmp_path, (GOOD + ",5\n").encode())
    assert acc == 0
    assert reasons(rej) == ["implausible_timestamp"]
