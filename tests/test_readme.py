"""The README's library example runs as shown (its stage commands: tests/spark/test_declared_ingest.py)."""

from __future__ import annotations

from outoforder.config import REPO_ROOT


def test_the_readmes_library_example_runs_as_shown():
    block = (REPO_ROOT / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), scope)  # the README's own code
    out = scope["out"]
    assert out.emitted == [(0, 1)] and out.late == []  # as its comment says
    assert type(scope["join"]).__name__ == "QJoin" and scope["state"]


def test_the_readme_stays_short_and_names_the_two_commands():
    text = (REPO_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "bash infra/main.sh" in text and "bash infra/test.sh" in text
