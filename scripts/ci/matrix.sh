#!/usr/bin/env bash
# Print the wheel matrix (`prebuild matrix`, from src/prebuild/tool/support.py) as the step output
# `matrix` for GitHub Actions. Runs prebuild's CLI from the source tree: no build needed.
# Usage: scripts/ci/matrix.sh [--cuda 13.0 ...]   (writes to $GITHUB_OUTPUT, else stdout)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
json=$(PYTHONPATH=src "$PYTHON" -m prebuild matrix "$@")
echo "matrix=$json" >> "${GITHUB_OUTPUT:-/dev/stdout}"
