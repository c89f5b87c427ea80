"""Small JSON files a stage leaves in the work dir for the scheduler or for other stages.

A status is a hint read without Spark (the Γ rule's ledger status for ``aggregate_stream``, the
Kafka ingest's coverage for the stream stages); the lake's tables stay the truth. Written
atomically: a reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from outoforder.config import Settings


def status_path(settings: Settings, kind: str, *names: str) -> Path:
    """``<work_dir>/status/<kind>/<names joined by __>.json`` (a ``/`` in a name becomes ``__``).

    >>> from outoforder.config import load_settings
    >>> status_path(load_settings(env={"OOO_WORK_DIR": "/w"}), "kafka", "yard/a").as_posix()
    '/w/status/kafka/yard__a.json'
    """
    return settings.work_dir / "status" / kind / ("__".join(n.replace("/", "__") for n in names) + ".json")


def write_status(path: Path, status: Any) -> None:
    """Write ``status`` as JSON to ``path``, atomically (a temporary file of this process, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(status, indent=1))
    tmp.replace(path)


def read_status(path: Path) -> Any | None:
    """The status at ``path``, or None when there is none yet."""
    return json.loads(path.read_text()) if path.exists() else None
