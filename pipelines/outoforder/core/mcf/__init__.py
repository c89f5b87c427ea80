"""Cuckoo filters and MCF, the windowed multiple cuckoo filter (docs/mcf.md)."""
