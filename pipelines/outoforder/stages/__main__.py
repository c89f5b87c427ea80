"""``python -m outoforder.stages``: see :mod:`outoforder.stages.cli`."""

import sys

from outoforder.stages.cli import main

sys.exit(main())
