"""Sliding-window aggregates with HPM: the job, the stream stage, the late-tuple ledger, repair and checks."""
