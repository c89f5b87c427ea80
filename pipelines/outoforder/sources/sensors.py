"""Which stream each sensor id belongs to: the DEBS 2013 game's, and the synthetic replays' (more players).

Shared by the readers (a row's stream) and the generator (which sensors it writes).
"""

from __future__ import annotations

# DEBS 2013 sensor metadata (shared/data/debs2013/metadata.txt): sensor id -> stream.
BALL_SENSORS = (4, 8, 10, 12)
TEAM_A_SENSORS = (13, 14, 97, 98, 47, 16, 49, 88, 19, 52, 53, 54, 23, 24, 57, 58, 59, 28)
TEAM_B_SENSORS = (61, 62, 99, 100, 63, 64, 65, 66, 67, 68, 69, 38, 71, 40, 73, 74, 75, 44)
REFEREE_SENSORS = (105, 106)
DEBS2013_STREAMS: dict[int, str] = {
    **{s: "ball" for s in BALL_SENSORS},
    **{s: "team_a" for s in TEAM_A_SENSORS},
    **{s: "team_b" for s in TEAM_B_SENSORS},
    **{s: "referee" for s in REFEREE_SENSORS},
}

# (left leg, right leg) of each player; DEBS ids first, then the extra players.
TEAM_A_PLAYERS = (
    (13, 14),
    (47, 16),
    (49, 88),
    (19, 52),
    (53, 54),
    (23, 24),
    (57, 58),
    (59, 28),
    (201, 202),
    (203, 204),
    (205, 206),
)
TEAM_B_PLAYERS = (
    (61, 62),
    (63, 64),
    (65, 66),
    (67, 68),
    (69, 38),
    (71, 40),
    (73, 74),
    (75, 44),
    (211, 212),
    (213, 214),
    (215, 216),
)
SYNTHETIC_STREAMS: dict[int, str] = {
    **DEBS2013_STREAMS,
    **{s: "team_a" for p in TEAM_A_PLAYERS for s in p},
    **{s: "team_b" for p in TEAM_B_PLAYERS for s in p},
}
