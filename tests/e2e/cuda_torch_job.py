"""The work of test_cuda_torch.py, as a background job (background.py): prebuild's sm_80 wheel
built by ``python -m build --no-isolation`` in .venv-cuda (torch 2.14.1+cu130) from a copy of
the checkout, that wheel installed into a copy of .venv-cuda, and a script run there: the
torch's CUDA version, an SSIM, whether the CUDA kernel is registered, the library's CUDA error,
whether CUDA was initialised, and the torch the manifest says it was built with.

Usage: python tests/e2e/cuda_torch_job.py WORK (steps in WORK/steps.json, job_steps.py). A step
that fails ends the job (exit status 0: the steps say what failed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from build_helpers import copy_checkout
from job_steps import COMPILE_TIMEOUT, Steps
from venvs import clone_venv, prepare_cuda_venv

CHECK = """
import json, torch, prebuild
from prebuild.ops._library import LIBRARY
x = torch.rand(1, 3, 20, 20)
print(json.dumps({"cuda": torch.version.cuda, "ssim": prebuild.fused_ssim(x, x).item(),
  "cuda_kernel": torch._C._dispatch_has_kernel_for_dispatch_key("prebuild::fused_ssim_forward", "CUDA"),
  "cuda_error": repr(LIBRARY.cuda_error), "initialized": torch.cuda.is_initialized(),
  "built_with": LIBRARY.manifest.built_with_torch}))
"""


def main(work: Path) -> None:
    steps = Steps(work)
    py = prepare_cuda_venv()
    build_env = {
        "PATH": f"{py.parent}:/usr/local/bin:/usr/bin:/bin",
        "PREBUILD_ARCHS": "sm_80",
        "PREBUILD_BUILD_DIR": str(work / "objects"),
        "HOME": str(work),
    }
    build = [str(py), "-m", "build", "--wheel", "--no-isolation", "--outdir", str(work / "dist")]
    # From a copy: setuptools writes build/bdist.* in the tree it builds, and `prebuild wheel`s
    # of the checkout running meanwhile (the shared wheels, gpu_check's dry run) share the
    # checkout's build/ under their lock, which this build does not take: one's bdist_wheel
    # removed the other's build/bdist.linux-x86_64/wheel mid-build (2026-11-29).
    source = copy_checkout(work / "checkout")
    if not steps.run("build", [*build, str(source)], build_env, COMPILE_TIMEOUT):
        return
    (wheel,) = (work / "dist").glob("*.whl")
    # Installed into a copy: .venv-cuda itself stays as the fixture made it (torch, build tools).
    copy = clone_venv(py.parent.parent, work / "venv-cuda")
    install = [str(copy), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)]
    if not steps.run("install", install, {"PATH": "/usr/bin:/bin", "HOME": str(work)}, 600):
        return
    steps.run("check", [str(copy), "-c", CHECK], {"PATH": "/usr/bin:/bin", "HOME": str(work)}, 300)


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]).resolve())
    except subprocess.TimeoutExpired as exc:
        sys.exit(f"a step ran past its time: {exc}")
