"""Data quality: Great Expectations suites, checkpoints and metrics."""
