"""JSON lines read in bulk by Arrow: the declared reader's fast path for JSON and Parquet rows.

Arrow's JSON reader takes a block of lines at once; a block it refuses (one malformed line, a
field whose type changes) is halved until the lines it refuses are few, and those are left to the
per-line path. The types of the fields are fixed from a sample first, so that every block reads
a field alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc


def is_text(t: pa.DataType) -> bool:
    """Whether an Arrow type is a string type."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def json_fields(
    texts: pa.Array, roles: Mapping[str, str]
) -> tuple[npt.NDArray[np.bool_], Callable[[str], pa.Array]] | None:
    """(the lines Arrow's JSON reader read as one object each, a field's values by name or dotted path).

    Only lines that are one object (``{`` ... ``}``), with no escape (a backslash) and no literal key that
    could shadow a dotted path, are read, so every line read gives exactly one row, and a row's
    field is what :func:`_path` finds. A group of lines that Arrow refuses (bad JSON, a duplicate
    key, a field that is a number in one line and text in another) is halved until the rest read;
    the lines left over take the per-line path. None when no line can be read in bulk.
    """
    names = set(roles)
    if any(not n.isascii() or '"' in n or "\\" in n for n in names) or any(
        p.startswith(q + ".") for p in names for q in names
    ):
        return None  # a field that is both a value and an object: per line
    n = len(texts)
    ok = as_mask(pc.starts_with(texts, "{")) & as_mask(pc.ends_with(texts, "}"))
    ok &= ~as_mask(pc.match_substring(texts, "\\"))
    for name in names:
        if "." in name:
            ok &= ~as_mask(pc.match_substring(texts, f'"{name}"'))
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    candidates = texts.take(pa.array(idx))
    schema = _json_schema(candidates, roles)
    tables: list[pa.Table] = []
    read = np.zeros(idx.size, dtype=bool)
    _read_halving(candidates, schema, 0, idx.size, read, tables)
    if not tables:
        return None
    ok[:] = False
    ok[idx[read]] = True
    table = pa.concat_tables(tables).combine_chunks()
    where = np.full(n, -1, dtype=np.int64)
    where[ok] = np.arange(int(ok.sum()))
    rows = None if ok.all() else pa.array(where, mask=where < 0)

    def col(name: str) -> pa.Array:
        head, *rest = name.split(".")
        values: pa.Array = table.column(head).chunk(0)
        for part in rest:
            values = pc.struct_field(values, part)
        return values if rows is None else values.take(rows)  # null on a line not read (not in ``ok``)

    return ok, col


JSON_BLOCK = 1 << 24  # bytes Arrow's JSON reader takes at once: far above a chunk of lines


JSON_MIN_LINES = 64  # a group of lines Arrow refuses is halved down to this size, then left per line


JSON_SAMPLE = 1000  # lines whose fields' kinds (integer, float, text) set the types of the rest


def _json_read(texts: pa.Array, schema: pa.Schema | None) -> pa.Table | None:
    """The lines as a table (one row per line), or None when Arrow refuses them."""
    import pyarrow.json as pj

    whole = pa.LargeListArray.from_arrays(
        pa.array([0, len(texts)], pa.int64()), texts.cast(pa.large_string())
    )
    body = pc.binary_join(whole, pa.scalar("\n", pa.large_string()))[0].as_buffer()
    parse = (
        pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        if schema is not None
        else pj.ParseOptions()
    )
    try:
        table = pj.read_json(
            pa.BufferReader(body),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(JSON_BLOCK, body.size + 1)),
            parse_options=parse,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return table if table.num_rows == len(texts) else None


def _json_schema(texts: pa.Array, roles: Mapping[str, str]) -> pa.Schema:
    """The types the used fields are read as: what the first lines hold, else the role's default.

    Values are floats (an integer too: ``float()`` of either is the same double) unless the sample
    holds them as text; an ISO 8601 time is text (Arrow would infer a timestamp); other fields are
    integers, floats or booleans as sampled, else text. A later line whose field has another kind
    fails its group's read and takes the per-line path.
    """
    tables: list[pa.Table] = []
    sample = texts.slice(0, JSON_SAMPLE)
    _read_halving(sample, None, 0, len(sample), np.zeros(len(sample), dtype=bool), tables)
    tree: dict[str, Any] = {}
    for name, role in roles.items():
        found = next((t for t in (_field_type(s, name) for s in tables) if t is not None), None)
        kind: pa.DataType = {"value": pa.float64(), "epoch": pa.int64()}.get(role, pa.string())
        if found is not None and role != "iso":
            if pa.types.is_integer(found):
                kind = pa.float64() if role == "value" else pa.int64()
            elif pa.types.is_floating(found):
                kind = pa.float64()
            elif pa.types.is_boolean(found):
                kind = pa.bool_()
            elif is_text(found) or pa.types.is_timestamp(found) or pa.types.is_date(found):
                kind = pa.string()
        *parents, leaf = name.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = kind

    def fields(node: dict[str, Any]) -> list[pa.Field]:
        return [pa.field(k, pa.struct(fields(v)) if isinstance(v, dict) else v) for k, v in node.items()]

    return pa.schema(fields(tree))


def _field_type(table: pa.Table, name: str) -> pa.DataType | None:
    """The type Arrow inferred for a field (a dotted path into structs), or None when absent or all null."""
    head, *rest = name.split(".")
    if head not in table.column_names:
        return None
    t: pa.DataType = table.schema.field(head).type
    for part in rest:
        if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
            return None
        t = t.field(part).type
    return None if pa.types.is_null(t) else t


def _read_halving(
    texts: pa.Array,
    schema: pa.Schema | None,
    lo: int,
    hi: int,
    read: npt.NDArray[np.bool_],
    out: list[pa.Table],
) -> None:
    """Read lines [lo, hi) into ``out`` in order, halving a group Arrow refuses; mark the lines read."""
    if hi <= lo:
        return
    table = _json_read(texts.slice(lo, hi - lo), schema)
    if table is not None:
        out.append(table)
        read[lo:hi] = True
        return
    if hi - lo <= JSON_MIN_LINES:
        return
    mid = (lo + hi) // 2
    _read_halving(texts, schema, lo, mid, read, out)
    _read_halving(texts, schema, mid, hi, read, out)


def as_mask(values: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.bool_]:
    """An Arrow boolean array as a numpy mask."""
    out: npt.NDArray[np.bool_] = np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)
    return out
