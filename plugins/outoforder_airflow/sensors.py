"""``LandingSensor``: wait until raw files are waiting in the landing bucket.

It asks the Spark venv (``python -m outoforder.stages landing --json``, no Spark started), so the
Airflow venv needs no object-store client and the listing follows the same settings as the ingest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from airflow.sdk import BaseSensorOperator


class LandingError(RuntimeError):
    """The landing zone could not be listed (storage down, bad settings): the poke fails loudly."""


class LandingSensor(BaseSensorOperator):
    """Succeeds once at least one file waits under ``<storage.landing_uri>/incoming/``.

    :param config: an optional TOML override (templated), as the stages' ``OOO_CONFIG``
    """

    template_fields = ("config",)
    ui_color = "#fdf3e1"

    def __init__(self, *, config: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config

    def poke(self, context: Any) -> bool:
        """List the landing zone; true when something waits."""
        python = os.environ.get("PYSPARK_PYTHON") or sys.executable
        env = {**os.environ, "OOO_CONFIG": self.config} if self.config else dict(os.environ)
        run = subprocess.run(
            [python, "-m", "outoforder.stages", "landing", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if run.returncode != 0:
            msg = f"listing the landing zone failed (exit {run.returncode}): {run.stderr.strip()[-2000:]}"
            raise LandingError(msg)
        files = json.loads(run.stdout.strip().splitlines()[-1])
        for f in files[:20]:
            self.log.info("waiting: %s (%s bytes)", f["uri"], f["size"])
        self.log.info("%d files waiting in the landing zone", len(files))
        return bool(files)
