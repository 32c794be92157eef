#!/usr/bin/env bash
# cibuildwheel's test step, run in a venv where the built wheel is installed: the wheel's
# binaries must match its manifest, doctor must find no failure, and the test suite's CPU
# tests must pass against the installed package (not the source tree).
# Usage: scripts/ci/test_wheel.sh PROJECT_DIR   (PYTEST_ARGS overrides the test selection)
set -euo pipefail
project=$(cd "${1:?usage: test_wheel.sh PROJECT_DIR}" && pwd)
package=$(python -c 'import os, prebuild; print(os.path.dirname(prebuild.__file__))')
case "$package" in
  "$project"/*) echo "test_wheel.sh: prebuild is imported from the source tree ($package), not the wheel" >&2; exit 1 ;;
esac
prebuild inspect "$package"
prebuild doctor --no-load
away=$(mktemp -d)   # away from the source tree, so `import prebuild` is the installed wheel
trap 'rm -rf "$away"' EXIT
cd "$away"
if [ -n "${PYTEST_ARGS:-}" ]; then
  read -ra selection <<< "$PYTEST_ARGS"
else
  selection=("$project/tests/ops" "$project/tests/runtime/test_arch.py" "$project/tests/runtime/test_manifest.py"
             -m "not slow and not simt" -q)
fi
python -m pytest -p no:cacheprovider --rootdir "$project" -c "$project/pyproject.toml" "${selection[@]}"
