#!/usr/bin/env bash
# Print the wheel matrix (`prebuild matrix`, from src/prebuild/tool/support.py) as the step output
# `matrix` for GitHub Actions, and `plain`: per CUDA version, every arch of it, for the plain wheel
# pip installs from the index of every wheel (beside the PEP 825 variant wheels). Runs prebuild's
# CLI from the source tree: no build needed.
# Usage: scripts/ci/matrix.sh [--cuda 13.0 ...]   (writes to $GITHUB_OUTPUT, else stdout)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
json=$(PYTHONPATH=src "$PYTHON" -m prebuild matrix "$@")
echo "matrix=$json" >> "${GITHUB_OUTPUT:-/dev/stdout}"
plain=$("$PYTHON" -c '
import json, sys
archs = {}
for row in json.loads(sys.argv[1])["include"]:
    archs.setdefault(row["cuda"], []).append(row["arch"])
print(json.dumps({"include": [{"cuda": c, "archs": ",".join(a)} for c, a in archs.items()]}))
' "$json")
echo "plain=$plain" >> "${GITHUB_OUTPUT:-/dev/stdout}"
