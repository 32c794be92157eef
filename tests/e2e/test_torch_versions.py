"""The stable-ABI promise on real torch releases: prebuild's sm_80 wheel, built here against the
CPU torch 2.13.0 for the stable-ABI target (torch-target in pyproject.toml), installs next to
other torch releases, loads its CPU and (where torch's CUDA major is the wheel's) CUDA libraries
there (no GPU needed to load), every stable-ABI function it needs is exported there, and it
gives fused_ssim and rasterization, forward and backward, the values it gives in torch 2.13.
Two other projects' wheels built against torch 2.14.1 come along: one on the stable ABI
(stable_ext) and one calling nothing of torch's (cuda_host_ext).

Every run checks the oldest release the target allows and the newest one (both CUDA builds,
gigabytes: torch_venvs.py makes them, in the background from the session's start where the
disk has room); ``scripts/torch_versions.sh`` runs every release in between too
(PREBUILD_TORCH_VERSIONS).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version
from torch_venvs import UNCAPPED, ensure, release, versions_to_check

from prebuild.tool.builder.config import read_config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TARGET = read_config(ROOT).torch_target
OLDEST = f"{TARGET}.0"
NEWEST = "2.15.0"  # a CUDA 13.2 build, above pip's local cap (torch<=2.14.1): lifted for it
VERSIONS = versions_to_check(OLDEST, NEWEST)

# fused_ssim and rasterization, forward and backward, on inputs made without an RNG (a
# generator's stream could change between releases): what the libraries compute, and whether
# they loaded their CUDA library without touching CUDA.
SCRIPT = r"""
import json, os, torch, prebuild
from prebuild.ops._library import LIBRARY

def wave(shape, phase):
    n = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)
    return 0.5 + 0.4 * torch.sin(0.37 * n + phase)

a = wave((1, 3, 40, 48), 0.0).requires_grad_()
b = wave((1, 3, 40, 48), 0.7)
ssim = prebuild.fused_ssim(a, b)
ssim.backward()

n = 64
grid = torch.stack(torch.meshgrid(torch.linspace(-1, 1, 8), torch.linspace(-1, 1, 8), indexing="ij"), -1).reshape(n, 2)
means = torch.cat([grid, torch.full((n, 1), 3.0)], 1).requires_grad_()
quats = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(n, 1)
scales = torch.full((n, 3), 0.08).requires_grad_()
opacities = (0.3 + 0.6 * wave((n,), 1.0)).clamp(0, 0.99).requires_grad_()
colors = wave((n, 3), 2.0).requires_grad_()
viewmats = torch.eye(4)[None]
Ks = torch.tensor([[[40.0, 0.0, 16.0], [0.0, 40.0, 16.0], [0.0, 0.0, 1.0]]])
image, alpha, _ = prebuild.rasterization(means, quats, scales, opacities, colors, viewmats, Ks, 32, 32, sh_degree=None)
(image.square().sum() + alpha.sum()).backward()

print(json.dumps({
    "torch": torch.__version__, "site": os.path.dirname(torch.__file__),
    "cuda": torch.version.cuda, "cuda_error": repr(LIBRARY.cuda_error),
    "cuda_kernel": torch._C._dispatch_has_kernel_for_dispatch_key("prebuild::fused_ssim_forward", "CUDA"),
    "initialized": torch.cuda.is_initialized(),
    "values": {"ssim": ssim.item(), "ssim_grad": a.grad.abs().sum().item(), "image": image.sum().item(),
               "alpha": alpha.sum().item(), "means_grad": means.grad.abs().sum().item(),
               "scales_grad": scales.grad.abs().sum().item(), "opacities_grad": opacities.grad.abs().sum().item(),
               "colors_grad": colors.grad.abs().sum().item()},
}))
"""


def dynamic_symbols(library: Path, defined: bool) -> set[str]:
    """The names in a library's dynamic symbol table, defined (exported) or undefined (needed)."""
    which = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(
        ["nm", "-D", which, str(library)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def run_script(python: Path, cwd: Path) -> dict:
    proc = subprocess.run(
        [str(python), "-c", SCRIPT], capture_output=True, text=True, cwd=cwd, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(built_wheel, tmp_path_factory) -> dict:
    """The values in this venv's torch 2.13 (prebuild installed in place: the same kernels)."""
    values = run_script(Path(sys.executable), tmp_path_factory.mktemp("ref"))
    assert values["torch"].startswith("2.13")
    return values["values"]


def test_the_target_is_the_oldest_release_the_headers_allow():
    """The headers' guards put what the kernels use (std::string arguments, Tensor::const_data_ptr)
    at 2.10: 2.9 refuses them (test_torch_target.py compiles for 2.9 to show it)."""
    assert Version(OLDEST) == Version("2.10.0")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_wheel_runs_in_torch(
    version, built_wheel, stable_ext_wheel, host_code_wheels, reference, venv_copy, tmp_path
):
    wheel = built_wheel("sm_80")
    python = venv_copy(ensure(version).parent.parent)
    try:
        check_the_wheel(version, wheel, python, reference, tmp_path)
        check_a_stable_classic_wheel(stable_ext_wheel[0], python, tmp_path)
        check_a_torch_free_classic_wheel(host_code_wheels["cuda_host_ext"].wheel, python, tmp_path)
    finally:
        # The copy's hard links would keep the template's gigabytes on disk after it is removed.
        shutil.rmtree(python.parent.parent)
        release(version)


def check_the_wheel(
    version: str, wheel: Path, python: Path, reference: dict, tmp_path: Path
) -> None:
    # the wheel's requirements from the machine's indexes, as a user's pip would get them
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=1200,
        env=UNCAPPED,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    result = run_script(python, tmp_path)
    assert result["torch"].split("+")[0] == version
    # A CUDA build of torch with the wheel's CUDA major (13): the CUDA library loaded beside the
    # CPU one; with another (PyPI's torch 2.10.0 is a CUDA 12.8 build), the loader says so and
    # the CPU ops run all the same; a CPU build (2.13.0 here) has no CUDA kernel at all. No CUDA
    # touched in any case.
    assert result["initialized"] is False
    if result["cuda"] is None:
        assert result["cuda_kernel"] is False, result
    elif result["cuda"].startswith("13."):
        assert result["cuda_error"] == "None" and result["cuda_kernel"] is True, result
    else:
        assert "CudaUnavailableError" in result["cuda_error"], result
        assert (
            f"built with CUDA 13.0, but torch uses CUDA {result['cuda']}" in result["cuda_error"]
        ), result
    # Every stable-ABI function the libraries need is exported by this torch, the CUDA library's
    # too (checked here by name, for the releases whose CUDA major is not the wheel's: their
    # loader does not load it). The current CUDA stream is looked up at run time, by dlsym.
    site = Path(result["site"])
    exported = set().union(
        *(dynamic_symbols(site / "lib" / name, True) for name in ("libtorch_cpu.so", "libc10.so"))
    )
    installed = site.parent / "prebuild"
    for library in ("_C.abi3.so", "_C_cuda.abi3.so"):
        needed = {
            s
            for s in dynamic_symbols(installed / library, False)
            if s.startswith(("aoti_torch_", "torch_"))
        }
        assert needed and needed <= exported, (library, sorted(needed - exported))
    # The same kernels give the same numbers; torch's own ops in rasterization's Python glue
    # (matmuls, reductions) may round differently from one release to another.
    for name, value in reference.items():
        assert result["values"][name] == pytest.approx(value, rel=1e-5, abs=1e-6), (
            name,
            result["values"],
        )


def install_and_run(wheel: Path, python: Path, script: str, cwd: Path):
    """pip installs another project's ``wheel`` (no index, no dependencies: torch is there) and
    runs ``script``: this torch's CUDA version, and the run."""
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        env=UNCAPPED,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    ran = subprocess.run(
        [str(python), "-c", script], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    cuda = subprocess.run(
        [str(python), "-c", "import torch; print(torch.version.cuda)"],
        capture_output=True, text=True, timeout=300,
    ).stdout.strip()  # fmt: skip
    return cuda, ran


def refused_for_its_cuda(ran: subprocess.CompletedProcess, cuda: str) -> str:
    """The guard's refusal of a CUDA 13 wheel beside a torch of another CUDA major."""
    error = " ".join(ran.stderr.split())
    assert ran.returncode != 0 and "WheelMisfitError" in error, error
    assert f"uses CUDA {cuda}, and the extension was built with CUDA 13.0" in error, error
    return error


def check_a_stable_classic_wheel(wheel: Path, python: Path, tmp_path: Path) -> None:
    """The same promise for another project's wheel: stable_ext, a setup.py project on the
    stable ABI that prebuild built against torch 2.14.1 (its pin: torch>=2.10), runs its op in
    this torch where the CUDA major is its own (13), and its guard says why not elsewhere."""
    script = (
        "import json, torch, stable_ext\n"
        "print(json.dumps({'cuda': torch.version.cuda, 'out': stable_ext.scale("
        "torch.arange(3.0), 2.5).tolist(), 'cuda_kernel': torch._C._dispatch_has_kernel_for_"
        "dispatch_key('stable_ext::scale', 'CUDA'), 'initialized': torch.cuda.is_initialized()}))"
    )
    cuda, ran = install_and_run(wheel, python, script, tmp_path)
    if cuda.startswith("13."):
        assert ran.returncode == 0, ran.stderr[-3000:]
        result = json.loads(ran.stdout.strip().splitlines()[-1])
        assert result == {
            "cuda": cuda, "out": [0.0, 2.5, 5.0], "cuda_kernel": True, "initialized": False
        }, result  # fmt: skip
    else:
        refused_for_its_cuda(ran, cuda)


def check_a_torch_free_classic_wheel(wheel: Path, python: Path, tmp_path: Path) -> None:
    """And for one whose libraries call nothing of torch's: cuda_host_ext (CUDA host code on
    Python's and CUDA's C APIs), built against torch 2.14.1 with no torch pin, installs beside
    any torch and runs where torch's CUDA major is its own (its libcudart.so.13 is there); its
    guard says why not elsewhere, naming no torch release to install."""
    script = (
        "import torch, cuda_host_ext\n"
        "count, error = cuda_host_ext.device_count()\n"
        "print(torch.version.cuda, count, error.startswith('cuda'), torch.cuda.is_initialized())"
    )
    cuda, ran = install_and_run(wheel, python, script, tmp_path)
    if cuda.startswith("13."):
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert ran.stdout.split("\n")[-2] == f"{cuda} 0 True False"  # no GPU here
    else:
        error = refused_for_its_cuda(ran, cuda)
        assert "pip install 'torch' --index-url https://download.pytorch.org/whl/cu130" in error
