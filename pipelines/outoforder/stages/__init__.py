"""Pipeline stages (extract -> transform -> load) and the ``python -m outoforder.stages`` CLI."""
