"""MIN_TORCH_TARGET is what torch's stable-ABI headers say, not a guess: compiled for the release
before it, prebuild's kernels meet the headers' version guards (std::string arguments and
Tensor::const_data_ptr need 2.10); for MIN_TORCH_TARGET they compile. The symbols that target
needs exist in that release (test_torch_versions.py loads and runs the wheel there)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from prebuild.tool.builder.compile import include_dirs
from prebuild.tool.builder.config import MIN_TORCH_TARGET, read_config
from prebuild.tool.builder.flags import PY_LIMITED_API_DEFINE, torch_target_define
from prebuild.tool.builder.toolchain import find_cxx, find_torch

ROOT = Path(__file__).resolve().parents[3]
# The sources that use what 2.9 lacks: the op schemas' string arguments, and const_data_ptr.
SOURCES = ["csrc/library.cpp", "csrc/ssim/ssim_cpu.cpp"]


def compile_for(source: str, target: Version) -> subprocess.CompletedProcess:
    includes = [f"-I{d}" for d in include_dirs(read_config(ROOT), find_torch())]
    return subprocess.run(
        [
            *find_cxx().command,
            "-std=c++17",
            "-fsyntax-only",
            torch_target_define(target),
            PY_LIMITED_API_DEFINE,
            *includes,
            str(ROOT / source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("source", SOURCES)
def test_the_kernels_compile_for_the_minimum_target_and_not_for_the_release_before(source):
    assert read_config(ROOT).torch_target == MIN_TORCH_TARGET  # prebuild's own kernels target it
    assert compile_for(source, MIN_TORCH_TARGET).returncode == 0
    before = Version(f"{MIN_TORCH_TARGET.major}.{MIN_TORCH_TARGET.minor - 1}")
    refused = compile_for(source, before)
    assert refused.returncode != 0
    assert "TORCH_VERSION_2_10_0" in refused.stderr or "const_data_ptr" in refused.stderr, (
        refused.stderr[-2000:]
    )
