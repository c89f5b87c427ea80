"""Continuous top-k over out-of-order sliding windows (SEEDS.md §3): references and the cache controller."""
