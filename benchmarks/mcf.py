"""MCF benchmark: the cuckoo filter against two public ones, and equi-join pre-filters on Spark.

``python -m benchmarks mcf`` (or ``bash infra/bench.sh mcf``):

1. **Filters** (one core, pure Python process): batch insert, lookup and delete of random 64-bit
   keys with this project's :class:`~outoforder.core.mcf.cuckoo.CuckooFilter` for f ∈ {8, 12, 16}
   and b ∈ {2, 4}, against cjrh-scalable-cuckoo-filter (Rust, called key by key from Python) and
   pyprobables' CuckooFilter (pure Python, key by key). Each records keys/s per operation, bits per
   key, the false-positive rate on keys never inserted against the analytic bound, and false
   negatives (inserted keys a lookup misses), also at a capacity that is not a power of two.
2. **Pre-filters** (Spark, ``local[2]``): a three-way equi-join of windowed streams whose keys
   overlap only partly (key selectivity 10 %, 30 %, 100 % on narrow rows; 10 % on rows with 4
   and 16 text columns), without a pre-filter, with MCF (behind its cost check, and applied
   whatever the check says: ``mcf-always``), with an exact semi-join, and with Spark's runtime
   Bloom filter (its thresholds lowered so it fires). Each records seconds and their ratio to no
   pre-filter, rows shuffled (Spark's shuffle-write records), the cost check's summary line and
   the join's output (identical for all, checked).

Writes ``mcf.json`` (one record per case × method), ``mcf.md`` and ``mcf.png``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import DEFAULT_OUT, log, machine, markdown_table, write_json
from outoforder.core.mcf.cuckoo import CuckooFilter

OPS = ("insert", "lookup", "delete")


def _keys(n: int, seed: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.random.default_rng(seed).integers(0, 2**62, n, dtype=np.int64)


def ours(n: int, b: int, f: int, capacity: int) -> list[dict[str, Any]]:
    """Our filter (core/mcf/cuckoo.py), batch operations."""
    keys, absent = _keys(n, 1), _keys(n, 2) + (2**62)  # disjoint ranges
    cf = CuckooFilter(capacity, b, f)
    t = time.perf_counter()
    stashed = cf.insert(keys)
    ins = time.perf_counter() - t
    t = time.perf_counter()
    found = cf.contains(keys)
    look = time.perf_counter() - t
    fpr = float(cf.contains(absent).mean())
    bits = cf.bits_per_key
    t = time.perf_counter()
    deleted = cf.delete(keys)
    dele = time.perf_counter() - t
    common = {
        "method": "ours (numpy batch)",
        "b": b,
        "f": f,
        "keys": n,
        "capacity": capacity,
        "bits_per_key": bits,
        "fpr": fpr,
        "fpr_bound": cf.fpr_bound,
        "false_negatives": int((~found).sum()),
        "not_deleted": int((~deleted).sum()),
        "stashed": stashed,
    }
    return [{**common, "case": op, "keys_per_s": n / s} for op, s in zip(OPS, (ins, look, dele), strict=True)]


def _per_key(
    insert: Callable[[Any], Any],
    contains: Callable[[Any], Any],
    delete: Callable[[Any], Any],
    keys: list[Any],
    absent: list[Any],
) -> tuple[tuple[float, float, float], int, float]:
    """Time a per-key filter: (insert, lookup, delete seconds), keys found, FPR on ``absent``."""
    t = time.perf_counter()
    for k in keys:
        insert(k)
    ins = time.perf_counter() - t
    t = time.perf_counter()
    found = sum(bool(contains(k)) for k in keys)
    look = time.perf_counter() - t
    fpr = sum(bool(contains(k)) for k in absent) / len(absent)
    t = time.perf_counter()
    for k in keys:
        delete(k)
    return (ins, look, time.perf_counter() - t), found, fpr


def scf(n: int, capacity: int) -> list[dict[str, Any]]:
    """cjrh-scalable-cuckoo-filter (Rust), one Python call per key."""
    from scf import PyScalableCuckooFilter

    keys, absent = _keys(n, 1).tolist(), (_keys(n, 2) + (2**62)).tolist()
    f = PyScalableCuckooFilter(capacity, 0.001)
    (ins, look, dele), found, fpr = _per_key(f.insert, f.might_contain, f.remove, keys, absent)
    common = {
        "method": "cjrh-scalable-cuckoo-filter (Rust, per key)",
        "b": None,
        "f": None,
        "keys": n,
        "capacity": capacity,
        "bits_per_key": None,
        "fpr": fpr,
        "fpr_bound": 0.001,  # its target rate
        "false_negatives": n - found,
    }
    return [{**common, "case": op, "keys_per_s": n / s} for op, s in zip(OPS, (ins, look, dele), strict=True)]


def pyprobables(n: int, capacity: int, b: int = 4) -> list[dict[str, Any]]:
    """The CuckooFilter of pyprobables (pure Python), one call per key."""
    from probables import CuckooFilter as PPCuckoo

    keys, absent = [str(k) for k in _keys(n, 1).tolist()], [str(k) for k in (_keys(n, 2) + (2**62)).tolist()]
    f = PPCuckoo(capacity=capacity, bucket_size=b, max_swaps=500, auto_expand=True)
    (ins, look, dele), found, fpr = _per_key(f.add, f.check, f.remove, keys, absent)
    fp_bits = 8 * int(getattr(f, "fingerprint_size", 4))
    common = {
        "method": "pyprobables (pure Python, per key)",
        "b": b,
        "f": fp_bits,
        "keys": n,
        "capacity": capacity,
        "bits_per_key": None,
        "fpr": fpr,
        "fpr_bound": 2 * b / 2**fp_bits,
        "false_negatives": n - found,
    }
    return [{**common, "case": op, "keys_per_s": n / s} for op, s in zip(OPS, (ins, look, dele), strict=True)]


def range_query(f: int, b: int = 4) -> dict[str, Any]:
    """The seed's MCF query over a time range, three streams: FPR against ε_MCF, false negatives."""
    from outoforder.core.mcf.windowed import mcf_fpr_bound, present_in_range, windows_in_range

    rng = np.random.default_rng(5)
    n, span, size, slide = 60_000, 600_000_000, 60_000_000, 10_000_000
    data = {s: (rng.integers(0, span, n), rng.integers(0, 200_000, n)) for s in ("a", "b", "c")}
    keys = np.arange(400_000, dtype=np.int64)  # half never occur anywhere
    t = time.perf_counter()
    got = present_in_range(
        data, keys, 0, span, size, slide, capacity=n // 8, bucket_size=b, fingerprint_bits=f
    )
    secs = time.perf_counter() - t
    truth = np.ones(keys.size, dtype=bool)
    for _, ks in data.values():
        truth &= np.isin(keys, ks)
    eps = 2 * b / 2**f
    wins = windows_in_range(span, size, slide)
    return {
        "case": "range query",
        "method": f"MCF (ours), 3 streams, {wins} windows each",
        "b": b,
        "f": f,
        "keys": int(keys.size),
        "keys_per_s": keys.size / secs,
        "bits_per_key": None,
        "fpr": float((got & ~truth).sum() / max((~truth).sum(), 1)),
        "fpr_bound": mcf_fpr_bound(eps, 3, wins),
        "false_negatives": int((truth & ~got).sum()),
    }


def main(
    out_dir: Path = DEFAULT_OUT, data_dir: Path | None = None, quick: bool = False, spark_on: bool = True
) -> int:
    """Run both parts; write JSON, Markdown and the plot."""
    del data_dir  # synthetic keys only
    t0 = time.monotonic()
    n = 200_000 if quick else 1_000_000
    n_loop = 20_000 if quick else 100_000  # the per-key libraries are timed on fewer keys
    capacity = int(n * 1.3)  # not a power of two
    records: list[dict[str, Any]] = []
    for b in (2, 4):
        for f in (8, 12, 16):
            rs = ours(n, b, f, capacity)
            records += rs
            speeds = ", ".join(f"{r['case']} {r['keys_per_s'] / 1e6:.2f} M/s" for r in rs)
            r0 = rs[0]
            log(
                "mcf",
                f"ours b={b} f={f}: {speeds}, fpr {r0['fpr']:.5f} (bound {r0['fpr_bound']:.5f}), "
                f"{r0['bits_per_key']:.1f} bits/key, false negatives {r0['false_negatives']}",
            )
    for f in (8, 12, 16):
        r = range_query(f)
        records.append(r)
        log(
            "mcf",
            f"range query f={f}: fpr {r['fpr']:.5f} (ε_MCF bound {r['fpr_bound']:.5f}), "
            f"false negatives {r['false_negatives']}, {r['keys_per_s'] / 1e6:.2f} M keys/s",
        )
    for name, fn in (("scf", scf), ("pyprobables", pyprobables)):
        rs = fn(n_loop, int(n_loop * 1.3))
        records += rs
        log("mcf", f"{name}: " + ", ".join(f"{r['case']} {r['keys_per_s'] / 1e6:.3f} M/s" for r in rs)
            + f", fpr {rs[0]['fpr']:.5f}, false negatives {rs[0]['false_negatives']}")  # fmt: skip
    joins: list[dict[str, Any]] = []
    if spark_on:
        from benchmarks.mcf_spark import join_cases

        joins = join_cases(quick)
    meta = {
        **machine(),
        "keys": n,
        "keys_per_key_library": n_loop,
        "seconds": time.monotonic() - t0,
        "quick": quick,
    }
    path = write_json(out_dir / "mcf.json", meta, records + joins)
    (out_dir / "mcf.md").write_text(markdown(records, joins, meta))
    plot(records, joins, out_dir)
    log("mcf", f"wrote {path} and mcf.md in {meta['seconds']:.0f} s")
    return 0


def markdown(records: list[dict[str, Any]], joins: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The report."""
    filt = markdown_table(
        records,
        [
            ("method", "filter", ""),
            ("b", "b", ""),
            ("f", "f", ""),
            ("case", "operation", ""),
            ("keys_per_s", "keys/s", ",.0f"),
            ("bits_per_key", "bits/key", ".1f"),
            ("fpr", "FPR", ".5f"),
            ("fpr_bound", "bound", ".5f"),
            ("false_negatives", "false negatives", ""),
        ],
    )
    parts = [
        "# MCF: cuckoo filters and equi-join pre-filters",
        "",
        f"Generated by `python -m benchmarks mcf` on {meta['date']} ({meta['cpus']} CPUs, "
        f"Python {meta['python']}), {meta['seconds']:.0f} s. Our filter: {meta['keys']:,} random keys, "
        f"batch calls, capacity 1.3 × the keys (not a power of two). The per-key libraries: "
        f"{meta['keys_per_key_library']:,} keys, one Python call per key.",
        "",
        "## Filters",
        "",
        filt,
        "",
    ]
    if joins:
        parts += [
            "## Three-way equi-join with pre-filters (Spark local[2])",
            "",
            markdown_table(
                joins,
                [
                    ("case", "case", ""),
                    ("method", "pre-filter", ""),
                    ("seconds", "seconds", ".2f"),
                    ("time_vs_none", "× none", ".2f"),
                    ("prefilter_applied", "applied", ""),
                    ("estimated_kept", "kept (cost check's estimate)", ".4f"),
                    ("shuffled_rows", "rows shuffled by the join", ","),
                    ("build_shuffled_rows", "rows shuffled building filters", ","),
                    ("rows_in", "rows in", ","),
                    ("rows_kept", "rows kept", ","),
                    ("output_rows", "join output", ","),
                    ("fpr_bound", "filter bound", ".5f"),
                ],
            ),
            "",
        ]
    return "\n".join(parts)


def plot(records: list[dict[str, Any]], joins: list[dict[str, Any]], out_dir: Path) -> None:
    """Keys/s per filter and operation; rows shuffled per pre-filter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    labels = [
        f"{r['method'].split(' (')[0]} b={r['b']} f={r['f']}" if r["b"] else r["method"].split(" (")[0]
        for r in records
        if r["case"] == "insert"
    ]
    for j, op in enumerate(OPS):
        ys = [r["keys_per_s"] for r in records if r["case"] == op]
        ax1.bar(np.arange(len(ys)) + j * 0.27, ys, 0.27, label=op)
    ax1.set_xticks(np.arange(len(labels)) + 0.27, labels, rotation=35, ha="right", fontsize=7)
    ax1.set_yscale("log")
    ax1.set_ylabel("keys / s")
    ax1.axhline(1e6, color="k", ls="--", lw=1)
    ax1.legend(fontsize=8)
    if joins:
        cases = list(dict.fromkeys(r["case"] for r in joins))
        methods = list(dict.fromkeys(r["method"] for r in joins))
        for j, m in enumerate(methods):
            ys = [
                next(r["shuffled_rows"] for r in joins if r["case"] == c and r["method"] == m) for c in cases
            ]
            ax2.bar(np.arange(len(cases)) + j * 0.2, ys, 0.2, label=m)
        sel = [next(r for r in joins if r["case"] == c) for c in cases]
        names = [f"selectivity {r['selectivity']:.0%}, {r.get('payload', 0)} text cols" for r in sel]
        ax2.set_xticks(np.arange(len(cases)) + 0.3, names, fontsize=8)
        ax2.set_ylabel("rows shuffled")
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "mcf.png", dpi=110)
    plt.close(fig)
