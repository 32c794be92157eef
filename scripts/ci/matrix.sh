#!/usr/bin/env bash
# Print the wheel matrix (`prebuild matrix`, from src/prebuild/tool/arch_support.py) as the step output
# `matrix` for GitHub Actions, and `plain`: per (torch,) CUDA version, every arch of it, for the plain wheel
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
groups = {}  # per (torch, CUDA version): the row without its arch, and every arch
for row in json.loads(sys.argv[1])["include"]:
    common = {k: v for k, v in row.items() if k not in ("arch", "ptx", "index_key")}
    groups.setdefault(json.dumps(common, sort_keys=True), (common, []))[1].append(row["arch"])
plain = [{**common, "archs": ",".join(archs)} for common, archs in groups.values()]
print(json.dumps({"include": plain}))
' "$json")
echo "plain=$plain" >> "${GITHUB_OUTPUT:-/dev/stdout}"
