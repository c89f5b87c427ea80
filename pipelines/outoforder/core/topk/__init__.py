"""Continuous top-k over out-of-order sliding windows (docs/topk.md): references and the cache controller."""
