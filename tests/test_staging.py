"""Staging folders under the lake: a killed ingest's folder is removed by a later one, a live one's is not."""

from outoforder.config import StorageSettings
from outoforder.io.files import remove_stale_staging, staging_name, staging_uri

DAY = 24 * 3600.0


def test_only_folders_of_the_prefix_started_longer_ago_than_the_limit_are_removed(tmp_path):
    now = 1_800_000_000.0
    names = {
        "old": staging_name("ingest", now - DAY - 1),  # a killed ingest's
        "live": staging_name("ingest", now - 60),  # an ingest running beside this one
        "other": staging_name("repair", now - 2 * DAY),  # another stage's
        "unnamed": "ingest-0123456789abcdef",  # no start in its name: left alone
    }
    for name in names.values():
        folder = tmp_path / "_staging" / name / "file_idx=0"
        folder.mkdir(parents=True)
        (folder / "part-0.parquet").write_bytes(b"rows")
    removed = remove_stale_staging(tmp_path, StorageSettings(), "ingest", DAY, now)
    assert removed == [names["old"]]
    left = sorted(p.name for p in (tmp_path / "_staging").iterdir())
    assert left == sorted(n for k, n in names.items() if k != "old")


def test_a_lake_without_staging_has_nothing_to_remove(tmp_path):
    assert remove_stale_staging(tmp_path, StorageSettings(), "ingest", DAY, 1e9) == []
    assert not (tmp_path / "_staging").exists()


def test_a_staging_name_carries_its_start_and_is_unique():
    a, b = staging_name("ingest", 1_700_000_000.9), staging_name("ingest", 1_700_000_000.1)
    assert a.startswith("ingest-1700000000-") and b.startswith("ingest-1700000000-") and a != b
    assert staging_uri("/lake", a) == f"/lake/_staging/{a}"
