"""Writes positions.csv.gz: the European-layout example of docs/sources.md ("A file in the European layout").

Buses and taxis drive about central Berlin and report once a second over a cellular link: the
vehicle's own clock in ISO 8601 with its UTC offset (``seen``), the collector's receive time in epoch
milliseconds (``recv_ms``), the position in degrees (``lat``, ``lon``), the cabin temperature and the
odometer. Numbers are written the European way: semicolons between fields, decimal commas, dots
between thousands (``12.345,6``). Most reports arrive within half a second; a few percent are held
back for seconds (a vehicle between cells). The file is in arrival order, as the collector wrote it.
Four lines are broken on purpose: a field too many, an arrival two years before its event (a
collector's clock reset), a latitude of 91,5 and a temperature written with a decimal point.

Run from the repository root: ``python include/examples/fleet/make_fleet.py`` (deterministic).
"""

from __future__ import annotations

import gzip
import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np

SEED, SECONDS = 7, 180
ORIGIN = (52.52, 13.40)  # the declaration's origin: x and y are metres east and north of it
VEHICLES = [("bus-1", "bus"), ("bus-2", "bus"), ("bus-3", "bus"), ("taxi-1", "taxi"), ("taxi-2", "taxi"),
            ("taxi-3", "taxi"), ("taxi-4", "taxi")]  # fmt: skip
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
CET = timezone(timedelta(hours=1))  # the vehicles' clocks write local time with its offset
M_PER_DEG_LAT = 111_320.0


def european(value: float, decimals: int) -> str:
    """``12345.6`` -> ``12.345,6``."""
    text = f"{value:,.{decimals}f}"
    return text.replace(",", "_").replace(".", ",").replace("_", ".")


def main() -> None:
    """Simulate, delay, sort by arrival, break four lines, write."""
    rng = np.random.default_rng(SEED)
    rows = []
    m_per_deg_lon = M_PER_DEG_LAT * math.cos(math.radians(ORIGIN[0]))
    for vehicle, kind in VEHICLES:
        pos = rng.uniform(-200, 200, 2)  # metres east, north of the origin: a few blocks
        vel = rng.normal(0, 4, 2)
        odometer = rng.uniform(20_000, 250_000)
        temp = rng.uniform(16, 24)
        for i in range(SECONDS):
            vel = 0.95 * vel + rng.normal(0, 0.8, 2)
            pos = np.clip(pos + vel, -300, 300)
            odometer += float(np.hypot(*vel)) / 1000
            temp += rng.normal(0, 0.05)
            seen = T0 + timedelta(seconds=i, milliseconds=int(rng.integers(0, 50)))
            delay_ms = rng.exponential(250) + (rng.uniform(2000, 8000) if rng.random() < 0.04 else 0)
            recv_ms = int(seen.timestamp() * 1000 + delay_ms)
            lat, lon = ORIGIN[0] + pos[1] / M_PER_DEG_LAT, ORIGIN[1] + pos[0] / m_per_deg_lon
            rows.append((recv_ms, vehicle, kind, seen, lat, lon, temp, odometer))
    rows.sort(key=lambda r: r[0])
    lines = ["vehicle;kind;seen;recv_ms;lat;lon;temp_c;odometer_km"]
    for recv_ms, vehicle, kind, seen, lat, lon, temp, odometer in rows:
        fields = (vehicle, kind, seen.astimezone(CET).isoformat(timespec="milliseconds"), str(recv_ms),
                  european(lat, 6), european(lon, 6), european(temp, 1), european(odometer, 1))  # fmt: skip
        lines.append(";".join(fields))
    lines[100] += ";extra"  # a field too many
    parts = lines[400].split(";")
    lines[400] = ";".join([*parts[:3], str(int(parts[3]) - 2 * 365 * 86_400_000), *parts[4:]])  # clock reset
    parts = lines[700].split(";")
    lines[700] = ";".join([*parts[:4], "91,5", *parts[5:]])  # an impossible latitude
    parts = lines[1000].split(";")
    lines[1000] = ";".join([*parts[:6], parts[6].replace(",", "."), *parts[7:]])  # a decimal point
    out = Path(__file__).with_name("positions.csv.gz")
    out.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    print(f"{out}: {len(lines) - 1} lines")


if __name__ == "__main__":
    main()
