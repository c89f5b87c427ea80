"""The datasets that ship beside the project (``shared/data``) and how to read each one.

A *source* is one arrival order: one file, or several files that continue one stream. Its id is
what bronze's ``source`` column holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from outoforder.errors import ConfigError


@dataclass(frozen=True)
class Dataset:
    """A file of the shared data folder, its reader and the source id it is ingested as."""

    source: str
    reader: str
    relative_path: str

    def path(self, data_dir: Path) -> Path:
        """Where the file is, given the data folder."""
        return data_dir / self.relative_path


BUILTIN: tuple[Dataset, ...] = (
    Dataset("debs2013/fullgame_head1000", "debs2013", "debs2013/fullgame_head1000_jkpjkpjkp.csv"),
    Dataset("debs2013/mini_soccer", "debs2013", "debs2013/mini_soccer_50k_sid8_13_61.csv.gz"),
    Dataset("debs2013/socstream_kickoff", "debs2013", "debs2013/socstream_kickoff_testslice.txt"),
    *(Dataset(f"ooo/d-{i}", "ooo", f"ooo-dataset/d-{i}.csv.gz") for i in range(1, 6)),
    Dataset("debs2015/first10004", "debs2015", "debs2015/sorted_data_first10004.csv.gz"),
)
BY_SOURCE = {d.source: d for d in BUILTIN}


def select(names: list[str] | None) -> list[Dataset]:
    """Datasets by source id or prefix (``ooo`` selects d-1..d-5); ``None`` or ``all`` = every one."""
    if not names or names == ["all"]:
        return list(BUILTIN)
    out: list[Dataset] = []
    for name in names:
        hits = [d for d in BUILTIN if d.source == name or d.source.startswith(name.rstrip("/") + "/")]
        if not hits:
            known = ", ".join(d.source for d in BUILTIN)
            msg = f"unknown dataset {name!r}; known: {known}"
            raise ConfigError(msg)
        out.extend(h for h in hits if h not in out)
    return out
