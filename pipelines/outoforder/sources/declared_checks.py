"""A declaration checked against a file before anything of it is written.

A file whose header lacks a declared column, or whose first records all fail on one declared
field, means the declaration describes the file wrongly (a unit, a name, a format): the ingest
stops with a message naming the field rather than quarantining every line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence

from outoforder.errors import InputError
from outoforder.sources.declaration import Declaration
from outoforder.sources.declared import DeclaredReader
from outoforder.sources.fields import bad_field
from outoforder.sources.readers import Reject


def header_fields(decl: Declaration, first_line: str) -> tuple[str, ...]:
    """A file's column names: a CSV's header (or the declaration's ``columns``), a Parquet row's fields.

    A Parquet file's first row, as JSON, holds every column, in the schema's order; JSON lines
    have no fixed columns (none returned).
    """
    if decl.format == "parquet":
        try:
            row = json.loads(first_line)
        except ValueError:
            return ()  # not readable: the ingest quarantines it as corrupt_file
        return tuple(row) if isinstance(row, dict) else ()
    if decl.format != "csv":
        return ()
    if not decl.header:
        return decl.columns
    try:
        names = next(
            csv.reader([first_line.lstrip("\ufeff")], delimiter=decl.delimiter, quotechar=decl.quote)
        )
    except (csv.Error, StopIteration) as e:
        msg = f"source {decl.name!r}: the header line cannot be read as CSV: {e}"
        raise InputError(msg) from e
    return tuple(n.strip() for n in names)


def check_fields(decl: Declaration, fields: Sequence[str], where: str) -> None:
    """Fail, naming them, when fields the declaration uses are not among a file's (before any write)."""
    if decl.format == "jsonl":
        return
    # a Parquet struct's field is named by a dotted path from its column
    missing = [c for c in decl.columns_used() if c not in fields and c.split(".")[0] not in fields]
    if missing:
        msg = (
            f"source {decl.name!r}: {where} has no column {', '.join(map(repr, missing))} "
            f"(its columns: {', '.join(fields) or 'none'}); fix the declaration [sources.{decl.name}]"
        )
        raise InputError(msg)


def check_sample(reader: DeclaredReader, lines: Sequence[str], where: str) -> None:
    """Fail when no line of a non-empty sample parses and they all fail on one declared field.

    One bad value is the data's fault and is quarantined; every value of a field failing means the
    declaration describes that field wrongly (a unit, a name, a format), so nothing is written.
    """
    failures: list[Reject] = []
    lo, hi = reader.decl.plausible_event_us
    for text in lines:
        if not text.strip():
            continue
        try:
            row = reader.parse(text)
            if not lo <= row.event_us <= hi:
                f = reader.decl.event_time
                why = f": {row.event_us} µs is outside [{lo}, {hi}] (is the unit {f.unit!r} right?)"
                raise bad_field("implausible_timestamp", f.column, why)
        except Reject as reject:
            failures.append(reject)
        else:
            return
    if not failures:
        return
    if len({(r.reason, r.column) for r in failures}) == 1 and failures[0].column:
        r = failures[0]
        msg = (
            f"source {reader.name!r}: {where}: none of the first {len(failures)} records fits the "
            f"declaration: {r.reason}, {r.detail}; fix the declaration [sources.{reader.name}]"
        )
        raise InputError(msg)
