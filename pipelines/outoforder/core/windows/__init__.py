"""Sliding windows on event time: assignment and exact aggregates (HPM, top-k)."""
