#!/usr/bin/env bash
# Check every downloaded wheel against its manifest (`prebuild inspect`), make the PEP 825
# variant twin of each per-arch wheel (`prebuild variant`: uv's one index for every GPU), then
# write the index site (`prebuild index`: pip's per-key indexes and the index of every
# wheel). DIST_DIR is left as it is. Runs prebuild's CLI from the source tree.
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
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
cp "${wheels[@]}" "$staging/"
per_arch=()
for wheel in "$staging"/*.whl; do
  # a per-arch wheel names its archs in its version (+cu130.sm90); a variant or plain one does not
  case "$(basename "$wheel")" in *+*cu[0-9]*.sm[0-9]*) per_arch+=("$wheel") ;; esac
done
if [ ${#per_arch[@]} -gt 0 ]; then
  prebuild variant "${per_arch[@]}" --out "$staging"
fi
prebuild index "$staging" --out "$2"
