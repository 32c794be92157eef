#!/usr/bin/env bash
# Check prebuild on a GPU machine in one command: see scripts/gpu_check.py (--help).
#   scripts/gpu_check.sh --fetch            # on a networked machine, first
#   scripts/gpu_check.sh OUT                # on the GPU machine, offline, from the source tree
#   scripts/gpu_check.sh --dry-run OUT      # on a CPU machine (CI runs this)
# PYTHON: the interpreter whose torch to use (default: python3, the GPU image's).
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
