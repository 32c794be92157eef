"""The build also works against a CUDA build of torch (2.14.1+cu130, the newest pip allows
here), and the wheel it makes loads there, with its CUDA library, on a machine with no GPU;
the same binaries load in the CPU torch 2.13.0 (the stable-ABI target)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_built_with_cuda_torch_loads_there_and_in_cpu_torch(
    cuda_torch_python, fresh_cuda_venv, tmp_path
):
    py = cuda_torch_python
    out = tmp_path / "dist"
    subprocess.run(
        [str(py), "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        timeout=1200,
        capture_output=True,
        env={
            "PATH": f"{py.parent}:/usr/local/bin:/usr/bin:/bin",
            "PREBUILD_ARCHS": "sm_80",
            "PREBUILD_BUILD_DIR": str(tmp_path / "objects"),
            "HOME": str(tmp_path),
        },
    )
    (wheel,) = out.glob("*.whl")
    assert "+cu130.sm80-cp310-abi3" in wheel.name
    # Installed into a copy: .venv-cuda itself stays as the fixture made it (torch, build tools).
    py = fresh_cuda_venv()
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)], check=True
    )
    script = """
import json, torch, prebuild
from prebuild.ops._library import LIBRARY
x = torch.rand(1, 3, 20, 20)
print(json.dumps({"cuda": torch.version.cuda, "ssim": prebuild.fused_ssim(x, x).item(),
  "cuda_kernel": torch._C._dispatch_has_kernel_for_dispatch_key("prebuild::fused_ssim_forward", "CUDA"),
  "cuda_error": repr(LIBRARY.cuda_error), "initialized": torch.cuda.is_initialized(),
  "built_with": LIBRARY.manifest.built_with_torch}))
"""
    proc = subprocess.run([str(py), "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
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
