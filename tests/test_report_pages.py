"""Which report pages a report run writes, and that one with nothing to write opens no Spark session."""

from __future__ import annotations

import pytest

from outoforder.quality.report import pages_due, report_paths
from outoforder.stages import cli, context


@pytest.fixture
def config(tmp_path):
    def write(**quality):
        path = tmp_path / "report.toml"
        lines = [f"{k} = {str(v).lower() if isinstance(v, bool) else v}" for k, v in quality.items()]
        path.write_text(
            f'[lake]\nroot = "{tmp_path / "lake"}"\n[quality]\nreports_dir = "{tmp_path / "reports"}"\n'
            + "\n".join(lines)
            + "\n"
        )
        return path

    return write


def settings_of(path):
    from outoforder.config import load_settings

    return load_settings(path)


def test_the_cumulative_page_waits_its_interval_and_run_pages_follow_the_setting(config):
    live = settings_of(config(cumulative_every_s=50, run_pages=False))
    assert pages_due(live, "join_stream__scheduled") == (True, False)  # no cumulative page yet
    cumulative, _ = report_paths(live)
    cumulative.parent.mkdir(parents=True)
    cumulative.write_text("<html></html>")
    assert pages_due(live, "join_stream__scheduled") == (False, False)
    default = settings_of(config(cumulative_every_s=50))
    assert pages_due(default, "join_stream__scheduled") == (False, True)
    assert pages_due(default) == (False, False)  # no run name: no run page
    assert pages_due(settings_of(config()), "r") == (True, True)  # every report rebuilds it by default


def test_a_report_with_nothing_to_write_ends_without_a_spark_session(config, monkeypatch):
    path = config(cumulative_every_s=50, run_pages=False)
    cumulative, _ = report_paths(settings_of(path))
    cumulative.parent.mkdir(parents=True)
    cumulative.write_text("<html></html>")

    def no_spark(*args, **kwargs):
        raise AssertionError("a Spark session was opened")

    monkeypatch.setattr(context, "open_session", no_spark)
    assert (
        cli.main(["--config", str(path), "report", "--run-name", "join_stream__x", "--sections", "join"]) == 0
    )
    with pytest.raises(AssertionError, match="a Spark session was opened"):  # a headline needs the tables
        cli.main(["--config", str(path), "report", "--headline"])
