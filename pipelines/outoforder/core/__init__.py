"""Pure algorithms: standard library and numpy only (an import-linter contract enforces it)."""
