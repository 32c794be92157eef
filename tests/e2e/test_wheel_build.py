"""End to end: `prebuild wheel` compiles real CUDA code with nvcc into wheels whose manifest
matches the binary, and a wheel installs and runs in a fresh venv without any nvcc."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from build_helpers import run_cli
from cuobjdump import cuobjdump_code

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.builder.compile import host_build_dir
from prebuild.tool.builder.resources import read_report, short_name
from prebuild.tool.builder.runtime_floor import floor_note, torch_runtime, wheel_runtime
from prebuild.tool.builder.toolchain import cpu_count, find_torch
from prebuild.tool.inspection import library_code, read_wheel_manifest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sm80_wheel(built_wheel) -> Path:
    return built_wheel("sm_80")


def cuda_library_code(wheel: Path, scratch: Path):
    """The archs inside the wheel's CUDA library, read by cuobjdump and by our fatbin
    reader: the two must agree."""
    with zipfile.ZipFile(wheel) as zf:
        lib = Path(zf.extract("prebuild/_C_cuda.abi3.so", scratch))
    code = cuobjdump_code(lib)
    assert library_code(lib.read_bytes()) == code
    return code


def test_wheel_name_tags_and_manifest(sm80_wheel, tmp_path):
    assert re.fullmatch(
        r"prebuild-0\.1\.0\+cu\d+\.sm80-cp310-abi3-linux_x86_64\.whl", sm80_wheel.name
    ), sm80_wheel.name
    manifest = read_wheel_manifest(sm80_wheel)  # also checks every library's sha256
    assert manifest.sass_archs == parse_arch_list("sm_80")
    assert manifest.ptx_archs == ()
    assert manifest.torch_target == "2.10"  # MIN_TORCH_TARGET: the oldest the headers allow
    assert manifest.cuda_version and manifest.package_version.endswith(
        "+cu" + manifest.cuda_version.replace(".", "") + ".sm80"
    )
    assert {lib.kind for lib in manifest.libraries} == {"cpu", "cuda"}
    nvcc_flags = manifest.flags["nvcc"]
    assert "-gencode=arch=compute_80,code=sm_80" in nvcc_flags
    assert "-DTORCH_TARGET_VERSION=0x020a000000000000" in nvcc_flags
    assert any(f.startswith("--threads") for f in nvcc_flags) and "-lineinfo" in nvcc_flags
    # The archs recorded are the ones really inside the binary.
    code = cuda_library_code(sm80_wheel, tmp_path)
    assert code.sass == manifest.sass_archs
    assert code.ptx == ()


def test_second_run_reuses_objects_and_says_what_the_wheel_needs_of_glibc(
    sm80_wheel, shared_objects, tmp_path
):
    """A second run compiles nothing. Its wheel, built on this machine, needs this machine's
    glibc and libstdc++ symbol versions: where they are newer than torch's own, a note says so."""
    proc = run_cli(
        "wheel", "--arch", "80", "--out", str(tmp_path), "--build-dir", str(shared_objects)
    )
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("*.whl")
    torch = find_torch()
    floor = floor_note(wheel_runtime(wheel), torch_runtime(torch.library_dir), torch.version_string)
    said = [" ".join(line.split()) for line in proc.stdout.splitlines() if "itself needs" in line]
    assert said == ([f"note: {floor}"] if floor else []), proc.stdout
    logs = list(shared_objects.glob("cuda/*sm80/build.log")) + [
        host_build_dir(shared_objects) / "build.log"
    ]
    assert len(logs) == 2, logs
    for log in logs:
        assert "no work to do" in log.read_text(), log


def test_the_cuda_files_compile_in_one_unit_per_nvcc_job(sm80_wheel, shared_objects):
    """[tool.prebuild] unity-build: with fewer nvcc jobs than .cu files (a 2-core machine runs
    2), each job compiles one generated unit including its share of the files, all of them
    once; with as many jobs, each file is its own unit."""
    files = sorted((ROOT / "csrc").rglob("*.cu"))
    (cuda_dir,) = shared_objects.glob("cuda/*sm80")
    units = sorted(cuda_dir.glob("unity/unity_*.cu"))
    objects = sorted(p.name for p in cuda_dir.glob("obj/*.cu.o"))
    if cpu_count() >= len(files):
        assert not units and len(objects) == len(files), objects
        return
    assert 1 <= len(units) <= cpu_count() and objects == [f"{u.name}.o" for u in units]
    included = [
        line.split('"')[1]
        for unit in units
        for line in unit.read_text().splitlines()
        if line.startswith("#include")
    ]
    assert sorted(included) == [str(f) for f in files]


def test_every_kernel_s_resources_are_recorded_and_none_of_ours_spills(
    sm80_wheel, shared_objects, tmp_path
):
    """ptxas's report of each kernel is kept in the CUDA build directory (also by a build that
    compiled nothing: the reports live beside the objects). No kernel of ours spills registers
    to local memory: each fits the registers its launch bounds allow (what does not fit
    spills). The build names the kernels that do (the CUB scan prebuild instantiates may: a
    library's, 4 bytes)."""
    (report,) = shared_objects.glob("cuda/*sm80/resources.json")
    rows = read_report(report)
    ours = [r for r in rows if r.kernel.startswith("_ZN8prebuild")]
    names = {short_name(r.kernel) for r in ours}
    assert {"ssim_forward_kernel", "ssim_backward_kernel<3>", "ssim_backward_kernel<4>"} <= names
    assert {"rasterize_forward_kernel<3>", "rasterize_backward_kernel<3>"} <= names
    assert {r.arch for r in rows} == {"sm_80"}
    assert [short_name(r.kernel) for r in ours if r.spills] == []
    assert all(0 < r.registers <= 255 for r in rows)
    before = report.read_text()
    proc = run_cli(
        "wheel", "--arch", "sm_80", "--out", str(tmp_path), "--build-dir", str(shared_objects)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report.read_text() == before  # nothing compiled, the same report


def test_fat_wheel_with_ptx(built_wheel, tmp_path):
    wheel = built_wheel("8.0,sm_90", "--fat", "--ptx")
    assert re.search(r"\+cu\d+\.sm80\.sm90\.ptx90-cp310-abi3", wheel.name), wheel.name
    manifest = read_wheel_manifest(wheel)
    code = cuda_library_code(wheel, tmp_path / "x")
    assert code.sass == manifest.sass_archs == parse_arch_list("sm_80,sm_90")
    assert code.ptx == manifest.ptx_archs == parse_arch_list("compute_90")


def test_unsupported_arch_is_refused_before_building(tmp_path):
    proc = run_cli(
        "wheel",
        "--arch",
        "sm_80,sm_70",
        "--out",
        str(tmp_path / "out"),
        "--build-dir",
        str(tmp_path / "objects"),
    )
    assert proc.returncode == 2
    assert "sm_70" in proc.stderr and "sm_90" in proc.stderr  # names the valid ones
    assert not (tmp_path / "out").exists() and not (tmp_path / "objects").exists()


def test_wheel_installs_and_runs_without_nvcc(sm80_wheel, fresh_venv, tmp_path):
    py = fresh_venv()
    env_dir = py.parent.parent
    # the wheel's requirements from the machine's indexes, as a user's pip would get them
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "torch==2.13.0",
            str(sm80_wheel),
        ],
        check=True,
        timeout=900,
    )
    script = """
import json, shutil, sys, torch, prebuild
torch.manual_seed(0)
x = torch.rand(2, 3, 21, 30, requires_grad=True)
y = (x.detach() + 0.1 * torch.rand(2, 3, 21, 30)).requires_grad_()
loss = prebuild.fused_ssim(x, y)
loss.backward()
print(json.dumps({"ssim": loss.item(), "gx": x.grad.abs().sum().item(),
                  "file": prebuild.ops.__file__, "nvcc": shutil.which("nvcc"),
                  "version": prebuild.__version__}))
"""
    clean_env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin:/bin",  # no nvcc (/usr/local/bin has one here)
        "HOME": str(tmp_path / "home"),
    }
    proc = subprocess.run(
        [str(py), "-c", script],
        cwd=tmp_path,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["nvcc"] is None
    assert result["file"].startswith(str(env_dir))
    assert "+cu" in result["version"] and result["version"].endswith(".sm80")

    import torch

    import prebuild

    torch.manual_seed(0)
    x = torch.rand(2, 3, 21, 30, requires_grad=True)
    y = (x.detach() + 0.1 * torch.rand(2, 3, 21, 30)).requires_grad_()
    loss = prebuild.fused_ssim(x, y)
    loss.backward()
    assert result["ssim"] == pytest.approx(loss.item(), abs=1e-6)
    assert result["gx"] == pytest.approx(x.grad.abs().sum().item(), rel=1e-5)
    assert 0.0 < result["ssim"] < 1.0


def test_cuda_library_loads_in_cpu_torch_and_registers_cuda_kernels(sm80_wheel, tmp_path):
    """The stable-ABI CUDA library, built against torch 2.13 headers with a static CUDA
    runtime, loads even in a CPU torch with no CUDA library on the machine, and registers
    the CUDA kernels (the loader skips it there only because no CUDA tensor can exist)."""
    with zipfile.ZipFile(sm80_wheel) as zf:
        zf.extractall(tmp_path)
    script = f"""
import torch
torch.ops.load_library({str(tmp_path / "prebuild" / "_C.abi3.so")!r})
torch.ops.load_library({str(tmp_path / "prebuild" / "_C_cuda.abi3.so")!r})
for op in ("fused_ssim_forward", "fused_ssim_backward"):
    for key in ("CPU", "CUDA"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key("prebuild::" + op, key), (op, key)
print("ok")
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr


def test_failed_build_reports_the_compiler_error_and_leaves_no_wheel(tmp_path):
    """A kernel that does not compile: exit 1 with nvcc's own message, nothing in --out.
    The project is a new one from `prebuild new` (its CPU library compiles in seconds)."""
    source = tmp_path / "broken-kernels"
    assert run_cli("new", "broken-kernels", "--dir", str(source)).returncode == 0
    kernels = sorted((source / "csrc").rglob("*.cu"))
    assert kernels
    for kernel in kernels:
        kernel.write_text('static_assert(false, "planted compile error");\n' + kernel.read_text())
    out = tmp_path / "out"
    proc = run_cli(
        "wheel",
        str(source),
        "--arch",
        "sm_80",
        "--out",
        str(out),
        "--build-dir",
        str(tmp_path / "objects"),
    )
    assert proc.returncode == 1
    assert "planted compile error" in proc.stderr and any(k.name in proc.stderr for k in kernels), (
        proc.stderr
    )
    assert not list(out.glob("*.whl")) and not list(out.glob(".*partial"))
