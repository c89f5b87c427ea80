"""Dataset readers, the disorder injector and the synthetic soccer generator (no Spark here)."""
