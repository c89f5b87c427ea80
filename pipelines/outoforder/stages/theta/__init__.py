"""θ-joins: the job, the backfill over event-time windows, joins of a user's files, and the checks."""
