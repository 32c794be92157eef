#!/usr/bin/env bash
# prebuild's wheel in every torch release its stable-ABI target allows, on the CPU: the oldest
# (the target) through the newest, each in its own venv (.venv-torch-<version>, made once;
# CUDA builds, a few GB each). The test suite checks the oldest and the newest in every run;
# this checks the ones in between too. Usage: scripts/torch_versions.sh [VERSION ...]
set -euo pipefail
cd "$(dirname "$0")/.."
versions=${*:-2.10.0 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0}
scripts/bootstrap.sh
PREBUILD_TORCH_VERSIONS=$(echo $versions | tr ' ' ',') \
  .venv/bin/python -m pytest -p no:cacheprovider -q tests/e2e/test_torch_versions.py
