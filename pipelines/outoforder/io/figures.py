"""What a stage run did to each table, for its orchestrator: per table, a small JSON object.

Airflow's ``StageOperator`` names a file in ``OOO_FIGURES_FILE`` before it starts a stage; the
stage records there, per table it wrote or judged, what the run did: the span and the rows a
stream pass wrote, the periods or windows a check judged and how many met the target. The
operator attaches them to the table's asset event, so Airflow's Assets view reads as a history
per interval (docs/quality.md, "Quality on the assets"). Without the variable nothing is
written: a stage run from the command line records nothing. Standard library only.

>>> import os, tempfile
>>> os.environ[ENV] = os.path.join(tempfile.mkdtemp(), "figures.json")
>>> record("gold/join_results", rows=12)
>>> record("gold/join_results", rows=30, passes=2)
>>> read(os.environ.pop(ENV))
{'gold/join_results': {'rows': 30, 'passes': 2}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

ENV = "OOO_FIGURES_FILE"


def record(table: str, **figures: Any) -> None:
    """Set ``figures`` of ``table`` in the run's file (a later value of a key replaces an earlier one)."""
    path = os.environ.get(ENV)
    if not path:
        return
    doc = read(path)
    doc.setdefault(table, {}).update(figures)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(doc, default=str))
    tmp.replace(path)  # a reader never sees half a file


def read(path: str | Path) -> dict[str, dict[str, Any]]:
    """The figures recorded in ``path`` so far (none: an empty dict)."""
    p = Path(path)
    if not p.is_file():
        return {}
    doc: dict[str, dict[str, Any]] = json.loads(p.read_text() or "{}")
    return doc
