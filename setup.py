"""Build the prebuild wheel: the compiled libraries come from a custom build_ext.

Build settings come from the environment (see README, "Building"):
  PREBUILD_ARCHS  CUDA archs, e.g. "sm_80,sm_90"; "" builds the CPU code only.
  PREBUILD_PTX    1 to also embed PTX for the newest arch.
  PREBUILD_JOBS   parallel compile jobs (default: from cores and free memory).
Build without isolation so the installed torch is used: pip install --no-build-isolation .
"""

import sys
from pathlib import Path

from setuptools import Extension, setup

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

from prebuild.build.setuptools_ext import PrebuildBuildExt, package_version  # noqa: E402

setup(
    version=package_version(),
    # One placeholder extension marks the wheel as binary and abi3; PrebuildBuildExt builds
    # both real libraries (CPU and CUDA) itself.
    ext_modules=[Extension("prebuild._C", sources=[], py_limited_api=True)],
    cmdclass={"build_ext": PrebuildBuildExt},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
