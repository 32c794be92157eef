"""prebuild.tool.builder.classic, the parts that need no CUDA torch: the shim toolkit, the arch check
on a built wheel's libraries, TORCH_CUDA_ARCH_LIST, what is kept of one wheel's build for the
next, and the preflight refusing a CPU torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from prebuild.runtime.arch import parse_arch, parse_arch_list
from prebuild.tool.builder.classic import (
    check_archs, keep_host_objects, make_cuda_shim, nvcc_outputs, preflight_classic, torch_cuda_arch_list,
)  # fmt: skip
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.toolchain import Nvcc, ToolchainError
from prebuild.runtime.manifest import BuiltLibrary

A = parse_arch_list


def test_torch_cuda_arch_list():
    assert torch_cuda_arch_list(A("sm_80,sm_90"), ()) == "8.0;9.0"
    assert torch_cuda_arch_list(A("sm_80,sm_90"), A("compute_90")) == "8.0;9.0+PTX"
    assert torch_cuda_arch_list(A("sm_90a"), ()) == "9.0a"


def test_nvcc_outputs_reads_every_spelling_and_refuses_what_it_cannot_place():
    calls = [["-c", "/b/a.cu", "-o", "/b/a.o"], ["-c", "/b/b.cu", "--output-file", "/b/b.o"],
             ["-c", "/b/c.cu", "-o=/b/c.o"], ["-dlink", "/b/a.o", "--output-file=/b/dlink.o"]]  # fmt: skip
    assert nvcc_outputs(calls) == [Path("/b/a.o"), Path("/b/b.o"), Path("/b/c.o"), Path("/b/dlink.o")]
    assert nvcc_outputs([]) == []
    assert nvcc_outputs([*calls, ["-c", "x.cu"]]) is None  # written where the call ran: unknown
    assert nvcc_outputs([["-c", "x.cu", "-o", "obj/x.o"]]) is None  # relative to that directory
    assert nvcc_outputs([["-c", "x.cu", "-o"]]) is None


def make_build_dir(root: Path) -> tuple[Path, Path, Path]:
    """setuptools' build/ after one wheel: a host object, an nvcc object, the linked extension."""
    temp = root / "build" / "temp.linux-x86_64-cpython-311" / "pkg"
    temp.mkdir(parents=True)
    (temp / "binding.o").write_bytes(b"host")
    (temp / "kernels.o").write_bytes(b"device")
    (temp.parent / "build.ninja").write_text("")
    lib = root / "build" / "lib.linux-x86_64-cpython-311" / "pkg"
    lib.mkdir(parents=True)
    (lib / "_C.so").write_bytes(b"linked")
    (root / "build" / "bdist.linux-x86_64").mkdir()
    return temp / "binding.o", temp / "kernels.o", lib / "_C.so"


def test_keep_host_objects_deletes_what_nvcc_wrote_and_the_linked_extension(tmp_path):
    host, device, linked = make_build_dir(tmp_path)
    assert keep_host_objects(tmp_path / "build", [device]) == 1
    assert host.exists() and not device.exists() and not linked.exists()
    assert [p.name for p in (tmp_path / "build").iterdir()] == ["temp.linux-x86_64-cpython-311"]
    assert (host.parent.parent / "build.ninja").exists()  # ninja's records stay with the objects


@pytest.mark.parametrize("wrote", [None, "outside", "missing build"])
def test_keep_host_objects_starts_clean_when_it_cannot_be_sure(tmp_path, wrote):
    host, device, _ = make_build_dir(tmp_path)
    if wrote == "missing build":
        shutil.rmtree(tmp_path / "build")
    nvcc_wrote = {None: None, "outside": [device, tmp_path / "elsewhere.o"], "missing build": [device]}[wrote]
    assert keep_host_objects(tmp_path / "build", nvcc_wrote) == 0
    assert not (tmp_path / "build").exists()


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
