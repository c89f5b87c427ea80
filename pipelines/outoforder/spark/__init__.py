"""Spark: the session factory and set-at-a-time operators."""
