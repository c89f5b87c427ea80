"""Side-by-side benchmarks against baselines and peers: ``bash infra/bench.sh <name>``.

Not part of the product package: ``outoforder`` never imports it (tests/test_architecture.py).
"""
