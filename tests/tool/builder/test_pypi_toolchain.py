"""Builds with no system CUDA: PyPI's compiler (`prebuild[toolchain]`) is found and used when
CUDA_HOME is unset, PATH has no nvcc and /usr/local/cuda is out of reach."""

from __future__ import annotations

import sys
from pathlib import Path

from prebuild.tool.builder.toolchain import SYSTEM_CUDA_ENV, cuda_tool_candidates, find_cuda_tool

ROOT = Path(__file__).resolve().parents[3]
PREBUILD = Path(sys.executable).parent / "prebuild"


def test_system_cuda_location_can_be_moved_or_ignored(tmp_path):
    default = cuda_tool_candidates("nvcc", {"PATH": ""})
    assert Path("/usr/local/cuda/bin/nvcc") in default
    moved = cuda_tool_candidates("nvcc", {"PATH": "", SYSTEM_CUDA_ENV: str(tmp_path)})
    assert tmp_path / "bin" / "nvcc" in moved and Path("/usr/local/cuda/bin/nvcc") not in moved
    ignored = cuda_tool_candidates("nvcc", {"PATH": "", SYSTEM_CUDA_ENV: ""})
    assert all("nvidia" in c.parts for c in ignored)  # only PyPI's packages remain


def test_pypi_nvcc_is_found_without_a_system_toolkit():
    found = find_cuda_tool("nvcc", {"PATH": "/usr/bin:/bin", SYSTEM_CUDA_ENV: ""})
    assert found is not None, "scripts/bootstrap.sh installs the toolchain extra (nvidia-cuda-nvcc)"
    assert "site-packages" in found.parts and found.parent.parent.name.startswith("cu")
