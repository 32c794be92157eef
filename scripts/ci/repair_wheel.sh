#!/usr/bin/env bash
# cibuildwheel's repair step: `auditwheel repair` to a manylinux tag, vendoring nothing of
# torch's or CUDA's: torch brings its own libraries at run time, the CUDA runtime is linked
# statically, and libcuda comes with the driver.
# Usage: scripts/ci/repair_wheel.sh DEST_DIR WHEEL
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: repair_wheel.sh DEST_DIR WHEEL" >&2
  exit 2
fi
dest=$1
wheel=$2
excludes=(
  libtorch.so libtorch_cpu.so libtorch_cuda.so libtorch_python.so libc10.so libc10_cuda.so
  'libcudart.so*' 'libcuda.so*' 'libnvrtc.so*' 'libcublas*.so*'
)
args=()
for lib in "${excludes[@]}"; do args+=(--exclude "$lib"); done
exec auditwheel repair --plat manylinux_2_28_x86_64 "${args[@]}" -w "$dest" "$wheel"
