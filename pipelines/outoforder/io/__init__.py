"""Delta IO: table schemas and paths in one place, idempotent writes, interval reads."""
