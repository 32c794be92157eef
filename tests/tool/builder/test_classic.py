"""prebuild.tool.builder.classic, the parts that need no CUDA torch: the shim toolkit, the arch check
on a built wheel's libraries, TORCH_CUDA_ARCH_LIST, and the preflight refusing a CPU torch."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch, parse_arch_list
from prebuild.tool.builder.classic import check_archs, make_cuda_shim, preflight_classic, torch_cuda_arch_list
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.toolchain import Nvcc, ToolchainError
from prebuild.runtime.manifest import BuiltLibrary

A = parse_arch_list


def test_torch_cuda_arch_list():
    assert torch_cuda_arch_list(A("sm_80,sm_90"), ()) == "8.0;9.0"
    assert torch_cuda_arch_list(A("sm_80,sm_90"), A("compute_90")) == "8.0;9.0+PTX"
    assert torch_cuda_arch_list(A("sm_90a"), ()) == "9.0a"


def lib(file, sass=(), ptx=()):
    return BuiltLibrary(file, "0" * 64, 1, tuple(parse_arch(a) for a in sass), tuple(parse_arch(a) for a in ptx))


def test_check_archs_accepts_exactly_the_request_and_cpu_only_libraries():
    check_archs("x.whl", [lib("ext.so", ["sm_90"]), lib("cpu_helper.so")], A("sm_90"), ())
    check_archs("x.whl", [lib("ext.so", ["sm_80", "sm_90"], ["compute_90"])], A("sm_80,sm_90"), A("compute_90"))


@pytest.mark.parametrize(
    "libraries, fragment",
    [
        ([lib("fused_ssim_cuda.so", ["sm_75", "sm_80", "sm_89"])], "fused_ssim_cuda.so: SASS sm_75, sm_80, sm_89"),
        ([lib("a.so", ["sm_90"]), lib("b.so", ["sm_80"])], "b.so: SASS sm_80"),
        ([lib("a.so", ["sm_90"], ["compute_90"])], "PTX compute_90"),
        ([lib("cpu_only.so")], "cpu_only.so: SASS none, PTX none"),
        ([], "no shared library at all"),
    ],
)  # fmt: skip
def test_check_archs_refuses_anything_else_naming_each_library(libraries, fragment):
    with pytest.raises(BuildError, match="No wheel was written") as info:
        check_archs("x.whl", libraries, A("sm_90"), ())
    assert fragment in str(info.value)


def fake_toolkit(root: Path) -> Path:
    for d in ("bin", "include/crt", "lib64", "nvvm"):
        (root / d).mkdir(parents=True)
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / "lib64" / "libcudart_static.a").write_text("")
    for tool in ("nvcc", "ptxas"):
        (root / "bin" / tool).write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
        (root / "bin" / tool).chmod(0o755)
    return root / "bin" / "nvcc"


def test_shim_toolkit_runs_the_shim_and_adds_what_torchs_cuda_packages_have(tmp_path, monkeypatch):
    real_nvcc = fake_toolkit(tmp_path / "cuda")
    nvidia = tmp_path / "site" / "nvidia" / "cu13"
    (nvidia / "include").mkdir(parents=True)
    (nvidia / "include" / "cublas_v2.h").write_text("")
    (nvidia / "include" / "cuda_runtime.h").write_text("// the package's copy: the toolkit's wins")
    (nvidia / "lib").mkdir()
    (nvidia / "lib" / "libcudart.so.13").write_text("")
    monkeypatch.setattr("prebuild.tool.builder.classic._nvidia_dirs", lambda kind: [nvidia / kind])
    log = tmp_path / "calls.jsonl"
    home = make_cuda_shim(Nvcc(real_nvcc), tmp_path / "shim", ["-gencode=arch=compute_90,code=sm_90"], log)
    assert (home / "include" / "cuda_runtime.h").resolve() == (tmp_path / "cuda" / "include" / "cuda_runtime.h")
    assert (home / "include" / "cublas_v2.h").exists() and (home / "include" / "crt").is_dir()
    assert (home / "lib64" / "libcudart.so").resolve() == nvidia / "lib" / "libcudart.so.13"
    assert (home / "lib64" / "libcudart_static.a").exists() and (home / "nvvm").is_dir()
    assert (home / "bin" / "ptxas").resolve() == tmp_path / "cuda" / "bin" / "ptxas"
    # The script finds prebuild.tool.builder.nvcc_shim by itself (it sets PYTHONPATH).
    out = subprocess.run([str(home / "bin" / "nvcc"), "-c", "k.cu", "-arch=sm_75", "--use_fast_math"],
                         capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["-c", "k.cu", "--use_fast_math", "-gencode=arch=compute_90,code=sm_90"]
    assert json.loads(log.read_text())["given"][-2:] == ["-arch=sm_75", "--use_fast_math"]


def test_preflight_refuses_a_cpu_torch_naming_the_torch_to_install(monkeypatch):
    from packaging.version import Version

    from prebuild.tool.builder.toolchain import Torch

    cpu_torch = Torch(Version("2.13.0"), "2.13.0+cpu", None, (), Path("/nowhere"))
    monkeypatch.setattr("prebuild.tool.builder.classic.find_torch", lambda: cpu_torch)
    monkeypatch.setattr("prebuild.tool.builder.classic.find_nvcc", lambda: pytest.fail("nvcc looked for before torch"))
    with pytest.raises(ToolchainError, match="2.13.0.cpu is a CPU build") as info:
        preflight_classic(A("sm_90"))
    assert "CUDA build of torch" in str(info.value) and "pip install" in str(info.value)
