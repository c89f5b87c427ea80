"""Side-by-side benchmarks against baselines and peers (``python -m outoforder.bench``)."""
