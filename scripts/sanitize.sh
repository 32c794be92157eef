#!/usr/bin/env bash
# Run the simt tests (every CUDA kernel body executed on the CPU) and the CPU op tests with
# the host libraries built under AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Builds prebuild (CPU + simt libraries, -fsanitize=address,undefined, any error fatal) into
# its own venv .venv-sanitize, then runs pytest there with the sanitizer runtimes preloaded
# (the Python interpreter itself is not instrumented). Exit status 0 means no error report.
# Usage: scripts/sanitize.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-sanitize
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  if [ -x .venv/bin/python ]; then
    # A hard-linked copy of the development venv: torch and the tools without installing
    # them again (~30 s). pip replaces files rather than writing into them, so what is
    # installed here never reaches .venv.
    cp -al .venv "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check torch==2.13.0
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  setuptools wheel ninja packaging typer rich build pytest hypothesis numpy
# gsplat 1.5.3 only as a test oracle (tests/ops/gsplat_oracle.py), as in scripts/bootstrap.sh.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps gsplat==1.5.3

echo "sanitize: building the host libraries with -fsanitize=address,undefined"
# From a copy of the checkout's files (tracked and new, not ignored): setuptools writes build/
# and *.egg-info where it builds, and a build of the checkout running meanwhile (prebuild
# wheel, the tests) must never package these instrumented libraries.
# Modification times kept, so that the next run recompiles only what changed.
source="$PWD/build/sanitize-source"
rm -rf "$source" && mkdir -p "$source"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
  xargs -0 cp -p --parents -t "$source"
PREBUILD_ARCHS= PREBUILD_SIMT=1 PREBUILD_SANITIZE=address,undefined \
  PREBUILD_BUILD_DIR="$PWD/build/sanitize" \
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  --no-build-isolation --no-deps --force-reinstall "$source"

# Refuse to report "clean" for libraries that were not instrumented.
site=$("$VENV/bin/python" -c 'import pathlib, prebuild; print(pathlib.Path(prebuild.__file__).parent)')
for lib in _C.abi3.so _C_simt.abi3.so; do
  if ! nm -D "$site/$lib" | grep __asan_report >/dev/null; then
    echo "sanitize: $site/$lib is not instrumented with AddressSanitizer" >&2
    exit 1
  fi
done

CXX=${CXX:-c++}
preload="$($CXX -print-file-name=libasan.so) $($CXX -print-file-name=libubsan.so)"
echo "sanitize: running the simt and CPU op tests with $preload preloaded"
# Leak checking is off: CPython and torch keep allocations alive until exit by design.
# Slow tests are not selected: they build wheels or start this script itself. Nor are the
# torch.compile and opcheck tests: they reach the same kernels the eager tests run, through
# Python (dynamo, inductor, and a compiler inductor starts with the runtimes preloaded), and
# took 61 of the 300 s (89 of 1147 tests).
# Nor test_cpu_isa.py: a sanitizer build compiles one copy of the CPU kernels, the baseline
# (PREBUILD_ONE_CPU_COPY, prebuild/cpu_isa.h); the copies are compared in the normal run.
# --capture=sys leaves file descriptor 2 alone, so a sanitizer report reaches the terminal.
LD_PRELOAD="$preload" \
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  "$VENV/bin/python" -m pytest -p no:cacheprovider --capture=sys -m "not slow" \
  -k "not opcheck and not torch_compile and not compiles_fullgraph" \
  --ignore=tests/ops/test_cpu_isa.py tests/simt tests/ops "$@"
