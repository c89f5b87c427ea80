"""Controllers that size buffers from observed quality (HPM's PD controller)."""
