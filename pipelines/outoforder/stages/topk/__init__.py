"""Continuous top-k with the adaptive cache duration: the job, the stream stage and its checks."""
