#!/usr/bin/env bash
# Set up (idempotent) and run one benchmark: bash infra/bench.sh join [--quick] [--out DIR].
# Results go to docs/benchmarks/<name>.json, .md and .png.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bash "$here/setup.sh"
source "$here/env.sh"
cd "$OOO_REPO"
exec "$OOO_SPARK_VENV/bin/python" -m benchmarks "$@"
