"""The object-store helpers that need no server (the MinIO round trips are in the scale-out tests)."""

import pytest

from outoforder.errors import ConfigError, InputError
from outoforder.io.objectstore import LandingFile, split_uri


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3a://lake", ("lake", "")),
        ("s3://lake/a/b/", ("lake", "a/b")),
        ("s3a://r/outoforder", ("r", "outoforder")),
    ],
)
def test_split_uri(uri, expected):
    assert split_uri(uri) == expected


@pytest.mark.parametrize("uri", ["/tmp/lake", "gs://b/p", "s3a:///nobucket", "lake"])
def test_split_uri_refuses_what_is_not_an_s3_uri(uri):
    with pytest.raises(ConfigError, match="s3a://bucket"):
        split_uri(uri)


def test_a_landing_key_names_reader_source_and_file():
    f = LandingFile(
        "landing",
        "zone/incoming/debs2013/debs2013/full-game/part-1.gz",
        "debs2013/debs2013/full-game/part-1.gz",
        7,
    )
    assert f.parts() == ("debs2013", "debs2013/full-game", "part-1.gz")
    assert f.uri == "s3a://landing/zone/incoming/debs2013/debs2013/full-game/part-1.gz"
    with pytest.raises(InputError, match="<reader>/<source id>/<file name>"):
        LandingFile("landing", "incoming/ooo/x.csv", "ooo/x.csv", 1).parts()
