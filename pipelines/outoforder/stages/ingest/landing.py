"""Landing-zone ingest: files dropped into the landing bucket -> bronze, each exactly once.

Every object under ``<storage.landing_uri>/incoming/<reader>/<source id>/<name>`` (``<reader>``: a
built-in reader, or a source declared in the settings' ``[sources.<name>]``) is ingested in
one go (:func:`outoforder.stages.ingest.files.ingest_files`: Spark tasks read the objects from the
store themselves, oldest key first in arrival order), then moved under ``ingested/``. An object
that cannot be ingested at all (a key of the wrong shape, an unknown reader, a file that does not
fit its source's declaration) is moved under ``rejected/`` with its reason beside it, and the
other files go on; bad *rows*, and a file that is not readable text, are quarantined as for any
file.

Exactly once: the ingest log keys a file by its content hash, so a crash between the ingest and the
moves (the objects are still under ``incoming/`` on the rerun) ingests nothing twice; a move copies
before it deletes, so no crash loses an object.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from outoforder.config import Settings
from outoforder.errors import ConfigError, InputError
from outoforder.io import objectstore
from outoforder.stages.ingest.files import IngestSummary, ingest_files
from outoforder.stages.ingest.plan import FileSpec, check_reader

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
    out: list[LandingOutcome] = []
    good: list[tuple[objectstore.LandingFile, FileSpec]] = []
    for item in items:
        try:
            reader, source, _ = item.parts()
            try:
                check_reader(settings, reader)
            except ConfigError as e:
                msg = f"{e} (the first folder under incoming/ names the reader)"
                raise InputError(msg) from e
        except InputError as e:
            out.append(LandingOutcome(item.uri, objectstore.reject(storage, item, str(e)), None, str(e)))
            log.info("%s", out[-1].line())
            continue
        good.append((item, FileSpec(item.uri, reader, source, origin=item.uri)))
    if good:
        misfits: dict[str, str] = {}  # a file that does not fit its declaration: rejected, the rest goes on
        summaries = iter(ingest_files(spark, settings, [spec for _, spec in good], misfits=misfits))
        for item, spec in good:
            if spec.path in misfits:
                moved = objectstore.reject(storage, item, misfits[spec.path])
                out.append(LandingOutcome(item.uri, moved, None, misfits[spec.path]))
            else:
                out.append(
                    LandingOutcome(item.uri, objectstore.mark_ingested(storage, item), next(summaries))
                )
            log.info("%s", out[-1].line())
    return out
