"""Positions in degrees to metres: a local projection about a declared origin, so θ stays in metres.

A declared source's ``values = { lat = ..., lon = ... }`` with ``origin = [lat0, lon0]`` becomes
``x`` (metres east of the origin) and ``y`` (metres north of it): an equirectangular projection
scaled by the WGS 84 ellipsoid's radii of curvature at the origin's latitude, so that near the
origin a metre in x or y is a metre on the ground.

The error grows with the distance from the origin: the east-west scale is the origin's, while
the true one shrinks with the cosine of the latitude. A distance between two points within
``r`` metres of the origin is off by a relative error of at most about

    |tan(lat0)| * r / R  +  (1 + tan(lat0)**2) * (r / R)**2,     R = 6,371 km

(about 0.2 % within 10 km of an origin at 52° N, 2 % within 100 km; at 70° N, 0.4 % and 4.5 %).
Choose the origin in the middle of the data; a distance join's θ of tens of metres over a city is
well inside this. ``tests/sources/test_geo.py`` checks the bound against geodesic distances.

>>> p = LocalProjection(52.52, 13.40)
>>> x, y = p.xy(np.array([52.52, 52.53]), np.array([13.40, 13.40]))
>>> [round(float(v), 1) for v in (x[0], y[0], y[1])]
[0.0, 0.0, 1112.8]
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

WGS84_A = 6_378_137.0  # semi-major axis, metres
WGS84_F = 1 / 298.257223563
MEAN_RADIUS_M = 6_371_008.8


class LocalProjection:
    """Degrees to metres east (x) and north (y) of ``(lat0, lon0)``: one arithmetic per line and in bulk."""

    def __init__(self, lat0: float, lon0: float) -> None:
        self.lat0, self.lon0 = lat0, lon0
        e2 = WGS84_F * (2 - WGS84_F)
        s2 = math.sin(math.radians(lat0)) ** 2
        prime_vertical = WGS84_A / math.sqrt(1 - e2 * s2)
        meridional = WGS84_A * (1 - e2) / (1 - e2 * s2) ** 1.5
        self.m_per_deg_lon = math.radians(1) * prime_vertical * math.cos(math.radians(lat0))
        self.m_per_deg_lat = math.radians(1) * meridional

    def xy(
        self, lat: npt.NDArray[np.float64], lon: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Metres east and north of the origin; a longitude difference is taken the short way round."""
        dlon = np.asarray(lon, dtype=np.float64) - self.lon0
        dlon = np.where(dlon > 180.0, dlon - 360.0, np.where(dlon < -180.0, dlon + 360.0, dlon))
        dlat = np.asarray(lat, dtype=np.float64) - self.lat0
        return dlon * self.m_per_deg_lon, dlat * self.m_per_deg_lat

    def point(self, lat: float, lon: float) -> tuple[float, float]:
        """One position (the per-line reader's): exactly what :meth:`xy` gives it in bulk."""
        x, y = self.xy(np.array([lat]), np.array([lon]))
        return float(x[0]), float(y[0])

    def error_bound(self, radius_m: float) -> float:
        """The relative error bound (module docstring) of distances between points within ``radius_m``."""
        t = abs(math.tan(math.radians(self.lat0)))
        r = radius_m / MEAN_RADIUS_M
        return t * r + (1 + t * t) * r * r
