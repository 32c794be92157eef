#!/usr/bin/env bash
# Check every downloaded wheel against its manifest (`prebuild inspect`), then write the
# pip index site (`prebuild index`). Runs prebuild's CLI from the source tree.
# Usage: scripts/ci/publish_index.sh DIST_DIR SITE_DIR
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: publish_index.sh DIST_DIR SITE_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
prebuild() { PYTHONPATH="$root/src" "$PYTHON" -m prebuild "$@"; }
shopt -s nullglob
wheels=("$1"/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "publish_index.sh: no wheels in $1" >&2
  exit 1
fi
for wheel in "${wheels[@]}"; do
  prebuild inspect "$wheel"
done
prebuild index "$1" --out "$2"
