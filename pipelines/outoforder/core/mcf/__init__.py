"""Cuckoo filters and MCF, the windowed multiple cuckoo filter (SEEDS.md §4)."""
