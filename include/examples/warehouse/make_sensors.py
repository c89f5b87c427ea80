"""Writes sensors.csv.gz: the example stream of "Your own stream, in one declaration" in the README.

Two kinds of devices move about a 20 m x 10 m warehouse floor and report their position five times
a second: forklifts and pickers. Reports travel over Wi-Fi, so most arrive within a few hundred
milliseconds and a few percent are held back for seconds (a device roaming between access points
sends its backlog late). The file is in arrival order, as a collector would write it, with the
device's own clock (``ts_ms``, epoch milliseconds) and the collector's (``received_at``, ISO 8601).
Three lines are broken on purpose, to show the quarantine.

Run from the repository root: ``python include/examples/warehouse/make_sensors.py`` (deterministic).
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

SEED, SECONDS, HZ = 11, 180, 5
DEVICES = [("fl-01", "forklift"), ("fl-02", "forklift"), ("pk-01", "picker"), ("pk-02", "picker"),
           ("pk-03", "picker")]  # fmt: skip
T0_MS = 1_731_657_600_000  # 2024-11-15T08:00:00Z


def main() -> None:
    """Simulate, delay, sort by arrival, break three lines, write."""
    rng = np.random.default_rng(SEED)
    rows = []
    n = SECONDS * HZ
    for device, kind in DEVICES:
        pos = rng.uniform([0, 0], [20, 10])
        vel = rng.normal(0, 1, 2)
        battery = rng.uniform(60, 95)
        for i in range(n):
            vel = 0.9 * vel + rng.normal(0, 0.3, 2)
            pos = pos + vel / HZ
            for axis, top in ((0, 20.0), (1, 10.0)):  # walls: bounce back in
                if not 0 <= pos[axis] <= top:
                    pos[axis] = min(max(pos[axis], 0.0), top)
                    vel[axis] = -vel[axis]
            battery -= rng.uniform(0, 0.004)
            ts = T0_MS + i * 1000 // HZ + int(rng.integers(0, 20))
            delay = rng.exponential(80) + (rng.uniform(1000, 5000) if rng.random() < 0.03 else 0)
            site = "north" if pos[0] < 10 else "south"
            rows.append((ts + delay, device, kind, ts, pos[0], pos[1], np.hypot(*vel), battery, site))
    rows.sort(key=lambda r: r[0])
    lines = ["device,kind,ts_ms,received_at,x_m,y_m,speed_mps,battery_pct,site"]
    for recv, device, kind, ts, x, y, speed, battery, site in rows:
        at = datetime.fromtimestamp(recv / 1000, UTC).isoformat(timespec="milliseconds")
        fields = (device, kind, ts, at.replace("+00:00", "Z"), f"{x:.2f}", f"{y:.2f}", f"{speed:.2f}")
        lines.append(",".join(map(str, fields)) + f",{battery:.1f},{site}")
    lines[100] = lines[100].replace(",north", ",north,extra")  # a field too many
    broken = lines[2000].split(",")
    lines[2000] = ",".join([*broken[:4], "n/a", *broken[5:]])  # x_m unreadable
    lines[3000] = "," + lines[3000].split(",", 1)[1]  # no device
    out = Path(__file__).with_name("sensors.csv.gz")
    out.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    print(f"{out}: {len(lines) - 1} lines")


if __name__ == "__main__":
    main()
