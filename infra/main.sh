#!/usr/bin/env bash
# Set everything up (idempotent) and run the main job on the embedded default:
# local Spark (local[2]), Delta tables under .local/lake, the real datasets from ../shared/data.
# Extra arguments go to the demo stage (e.g. --preset qjoin_d1).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
source "$here/env.sh"
cd "$OOO_REPO"
exec "$OOO_SPARK_VENV/bin/python" -m outoforder.stages demo "$@"
