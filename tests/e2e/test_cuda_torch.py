"""The build also works against a CUDA build of torch (2.14.1+cu130, the newest pip allows
here), and the wheel it makes loads there, with its CUDA library, on a machine with no GPU;
the same binaries load in the CPU torch 2.13.0 (the stable-ABI target). A full build of
prebuild's kernels: it runs in the background from the session's start (cuda_torch_job.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import background
import pytest
from job_steps import read_steps

pytestmark = [pytest.mark.slow, pytest.mark.background("cuda-torch")]

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_built_with_cuda_torch_loads_there_and_in_cpu_torch(tmp_path):
    job, work = background.result("cuda-torch", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    steps = {step["what"]: step for step in read_steps(work)}
    for what in ("build", "install", "check"):
        assert steps[what]["returncode"] == 0, (
            steps[what]["stdout"][-3000:] + steps[what]["stderr"][-3000:]
        )
    (wheel,) = (work / "dist").glob("*.whl")
    assert "+cu130.sm80-cp310-abi3" in wheel.name
    result = json.loads(steps["check"]["stdout"].strip().splitlines()[-1])
    assert result["cuda"] == "13.0" and result["built_with"].startswith("2.14.1")
    assert result["ssim"] == pytest.approx(1.0, abs=1e-6)
    assert result["cuda_kernel"] is True and result["cuda_error"] == "None"
    assert result["initialized"] is False  # loading initialised no CUDA

    # Built against 2.14.1's headers, targeting 2.13: the same files load in torch 2.13.0.
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp_path / "unpacked")
    lib_dir = tmp_path / "unpacked" / "prebuild"
    check = f"""
import torch
assert torch.__version__.startswith("2.13"), torch.__version__
torch.ops.load_library({str(lib_dir / "_C.abi3.so")!r})
torch.ops.load_library({str(lib_dir / "_C_cuda.abi3.so")!r})
x = torch.rand(1, 3, 20, 20)
print(torch.ops.prebuild.fused_ssim_forward(x, x, False)[0].mean().item())
"""
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout.strip().splitlines()[-1]) == pytest.approx(1.0, abs=1e-6)
