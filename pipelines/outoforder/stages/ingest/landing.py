"""Landing-zone ingest: files dropped into the landing bucket -> bronze, each exactly once.

For every object under ``<storage.landing_uri>/incoming/<reader>/<source id>/<name>``, oldest key
first: fetch it to ``<work dir>/landing-s3/``, ingest it (:func:`outoforder.stages.ingest.ingest_file`,
recording the object's URI in the ingest log), then move it under ``ingested/``. An object that cannot
be ingested at all (a key of the wrong shape, an unknown reader, unreadable content) is moved under
``rejected/`` with its reason beside it; bad *rows* are quarantined as for any file.

Exactly once: the ingest log keys a file by its content hash, so a crash between the ingest and the
move (the object is still under ``incoming/`` on the rerun) ingests nothing twice; the move copies
before it deletes, so no crash loses an object.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from outoforder.config import Settings
from outoforder.errors import InputError
from outoforder.io import objectstore
from outoforder.sources.readers import READERS
from outoforder.stages.ingest.files import IngestSummary, ingest_file

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LandingOutcome:
    """What happened to one landing object."""

    uri: str
    moved_to: str
    summary: IngestSummary | None  # None: rejected
    reason: str = ""

    def line(self) -> str:
        """One progress line."""
        if self.summary is None:
            return f"[landing] rejected {self.uri} -> {self.moved_to}: {self.reason}"
        return f"{self.summary.line()}\n[landing] {self.uri} -> {self.moved_to}"


def ingest_landing(spark: Any, settings: Settings, limit: int | None = None) -> list[LandingOutcome]:
    """Ingest every pending landing object (at most ``limit``), logging a line per object."""
    storage = settings.storage
    items = objectstore.pending(storage)[:limit]
    log.info("[landing] %d files waiting under %s/incoming/", len(items), storage.landing_uri)
    folder = settings.work_dir / "landing-s3"
    out = []
    for item in items:
        try:
            reader, source, _ = item.parts()
            if reader not in READERS:
                known = ", ".join(sorted(READERS))
                msg = f"unknown reader {reader!r} (the first folder under incoming/); known: {known}"
                raise InputError(msg)
            local = objectstore.fetch(storage, item, folder)
            summary = ingest_file(spark, settings, local, reader, source, origin=item.uri)
        except InputError as e:
            outcome = LandingOutcome(item.uri, objectstore.reject(storage, item, str(e)), None, str(e))
        else:
            local.unlink(missing_ok=True)
            outcome = LandingOutcome(item.uri, objectstore.mark_ingested(storage, item), summary)
        log.info("%s", outcome.line())
        out.append(outcome)
    return out
