#!/usr/bin/env bash
# Install the CUDA compiler and runtime headers of one CUDA version in a manylinux_2_28
# (AlmaLinux 8) container: cibuildwheel's before-all. Only what the build needs: nvcc, the
# static CUDA runtime and its headers (not the whole toolkit).
# Usage: scripts/ci/install_cuda.sh 13.0      DRY_RUN=1 prints the commands instead.
set -euo pipefail
version=${1:-${CUDA_VERSION:-}}
if ! [[ "$version" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
  echo "install_cuda.sh: give a CUDA version like 13.0 (got '${version}')" >&2
  exit 2
fi
major=${BASH_REMATCH[1]}
minor=${BASH_REMATCH[2]}
dash="${major}-${minor}"
arch=$(uname -m)
[ "$arch" = aarch64 ] && arch=sbsa
repo="https://developer.download.nvidia.com/compute/cuda/repos/rhel8/${arch}/cuda-rhel8.repo"
packages=("cuda-nvcc-${dash}" "cuda-cudart-devel-${dash}" "cuda-crt-${dash}" "cuda-cccl-${dash}")
if [ "$major" -lt 13 ]; then
  packages=("cuda-nvcc-${dash}" "cuda-cudart-devel-${dash}" "cuda-cccl-${dash}")  # crt is in nvcc before 13
fi
run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then echo "$*"; else "$@"; fi
}
run dnf config-manager --add-repo "$repo"
run dnf install -y "${packages[@]}"
run ln -sfn "/usr/local/cuda-${major}.${minor}" /usr/local/cuda
echo "install_cuda.sh: CUDA ${major}.${minor} in /usr/local/cuda-${major}.${minor} (CUDA_HOME)"
