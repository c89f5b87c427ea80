"""Getting arrivals into bronze: files, the landing bucket, and synthetic replays."""
