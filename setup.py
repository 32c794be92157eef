"""Build the prebuild wheel: the compiled libraries come from prebuild's own build_ext,
driven by [tool.prebuild] in pyproject.toml.

Build settings come from the environment (see README, "Building"):
  PREBUILD_ARCHS  CUDA archs, e.g. "sm_80,sm_90"; "" builds the CPU code only.
  PREBUILD_PTX    1 to also embed PTX for the newest arch.
  PREBUILD_JOBS   parallel compile jobs (default: from cores and free memory).
Build without isolation so the installed torch is used: pip install --no-build-isolation .
"""

import importlib.util
import sys
from pathlib import Path

# With --no-build-isolation (the only way to build against the torch you have) pip installs
# none of pyproject.toml's build requirements: name the missing ones before anything fails.
BUILD_REQUIREMENTS = {
    "setuptools": "setuptools",
    "wheel": "wheel",
    "ninja": "ninja",
    "packaging": "packaging",
    "torch": "torch>=2.10",
}
_missing = [
    req for module, req in BUILD_REQUIREMENTS.items() if importlib.util.find_spec(module) is None
]
if _missing:
    sys.exit(
        f"prebuild's build needs {', '.join(_missing)}, which this environment lacks. A build "
        "with --no-build-isolation uses the installed packages and installs none itself; run:\n"
        f"  pip install {' '.join(repr(r) if '>' in r else r for r in _missing)}\n"
        "then build again (see README, 'Building from source with pip')."
    )

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

# prebuild's own kernels are a native project like any other: [tool.prebuild] in pyproject.toml.
from prebuild.tool.builder.setuptools_ext import kernels_setup  # noqa: E402

kernels_setup()
