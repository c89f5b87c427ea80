"""The local projection's documented error bound holds against geodesic distances on the WGS 84 ellipsoid.

The oracle is Vincenty's inverse formula (accurate to well under a millimetre at these distances),
written here from its published equations; the projection must agree within
:meth:`~outoforder.sources.geo.LocalProjection.error_bound` for points within a radius of the origin.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from outoforder.sources.geo import WGS84_A, WGS84_F, LocalProjection


def vincenty_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """The geodesic distance in metres between two points (Vincenty, 1975, inverse problem)."""
    a, f = WGS84_A, WGS84_F
    b = a * (1 - f)
    big_l = math.radians(lon2 - lon1)
    u1 = math.atan((1 - f) * math.tan(math.radians(lat1)))
    u2 = math.atan((1 - f) * math.tan(math.radians(lat2)))
    su1, cu1, su2, cu2 = math.sin(u1), math.cos(u1), math.sin(u2), math.cos(u2)
    lam = big_l
    for _ in range(200):
        sl, cl = math.sin(lam), math.cos(lam)
        s_sig = math.hypot(cu2 * sl, cu1 * su2 - su1 * cu2 * cl)
        if s_sig == 0:
            return 0.0
        c_sig = su1 * su2 + cu1 * cu2 * cl
        sig = math.atan2(s_sig, c_sig)
        s_alpha = cu1 * cu2 * sl / s_sig
        c2_alpha = 1 - s_alpha**2
        c2_sm = c_sig - 2 * su1 * su2 / c2_alpha if c2_alpha else 0.0
        c = f / 16 * c2_alpha * (4 + f * (4 - 3 * c2_alpha))
        prev = lam
        lam = big_l + (1 - c) * f * s_alpha * (sig + c * s_sig * (c2_sm + c * c_sig * (-1 + 2 * c2_sm**2)))
        if abs(lam - prev) < 1e-13:
            break
    u2_ = c2_alpha * (a * a - b * b) / (b * b)
    k1 = (math.sqrt(1 + u2_) - 1) / (math.sqrt(1 + u2_) + 1)
    big_a = (1 + k1 * k1 / 4) / (1 - k1)
    big_b = k1 * (1 - 3 / 8 * k1 * k1)
    inner = c_sig * (-1 + 2 * c2_sm**2) - big_b / 6 * c2_sm * (-3 + 4 * s_sig**2) * (-3 + 4 * c2_sm**2)
    d_sig = big_b * s_sig * (c2_sm + big_b / 4 * inner)
    return b * big_a * (sig - d_sig)


def test_the_oracle_knows_a_degree_of_latitude():
    assert vincenty_m(0, 0, 1, 0) == pytest.approx(110_574.4, abs=0.1)  # at the equator


@pytest.mark.parametrize("lat0", [0.0, 35.0, 52.52, 70.0, -45.0])
@pytest.mark.parametrize("radius_m", [1_000.0, 10_000.0, 100_000.0])
def test_distances_are_within_the_documented_bound(lat0, radius_m):
    rng = np.random.default_rng(int(abs(lat0) * 100) + int(radius_m))
    proj = LocalProjection(lat0, 13.4)
    deg = radius_m / 111_000 / math.sqrt(2)  # a box whose corners are about radius_m away
    lat = lat0 + rng.uniform(-deg, deg, 400)
    lon = 13.4 + rng.uniform(-deg, deg, 400) / math.cos(math.radians(lat0))
    x, y = proj.xy(lat, lon)
    worst = 0.0
    for i in range(0, 400, 2):
        true = vincenty_m(lat[i], lon[i], lat[i + 1], lon[i + 1])
        if true > 1.0:
            worst = max(worst, abs(math.hypot(x[i] - x[i + 1], y[i] - y[i + 1]) - true) / true)
    assert worst <= proj.error_bound(radius_m * 1.05)
    if lat0 == 52.52 and radius_m == 10_000:
        assert proj.error_bound(radius_m) < 0.0025  # the figure the docs give: about 0.2 %


def test_a_longitude_difference_is_taken_the_short_way_round():
    proj = LocalProjection(0.0, 179.9)
    x, _ = proj.point(0.0, -179.9)
    assert x == pytest.approx(0.2 * proj.m_per_deg_lon)
