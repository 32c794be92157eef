"""prebuild.tool.builder.toolchain: finding nvcc and checking it against torch."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from prebuild.runtime.arch import Arch
from prebuild.tool.builder import toolchain
from prebuild.tool.builder.toolchain import (
    HostCompiler,
    Nvcc,
    ToolchainError,
    check_cuda_matches_torch,
    compile_launcher,
    compiler_include_dirs,
    find_cxx,
    find_nvcc,
    find_torch,
    nvcc_candidates,
    parse_nvcc_dryrun,
    parse_nvcc_version,
    read_torch_version_file,
    search_dirs,
    split_cxx,
)

SYSTEM_NVCC = Path("/usr/local/cuda/bin/nvcc")
needs_system_nvcc = pytest.mark.skipif(
    not (SYSTEM_NVCC.is_file() and os.access(SYSTEM_NVCC, os.X_OK)),
    reason="no CUDA toolkit at /usr/local/cuda",
)

NVCC_13_OUTPUT = """\
nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


def make_executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- nvcc --version ----------------------------------------------------------------------


def test_parse_nvcc_version_real_output():
    assert parse_nvcc_version(NVCC_13_OUTPUT) == Version("13.0")


def test_parse_nvcc_version_12():
    text = NVCC_13_OUTPUT.replace("release 13.0, V13.0.88", "release 12.8, V12.8.93")
    assert parse_nvcc_version(text) == Version("12.8")


@pytest.mark.parametrize("output", ["", "garbage", "nvcc: command not found", "release thirteen"])
def test_parse_nvcc_version_garbage(output):
    with pytest.raises(ToolchainError, match="cannot read the CUDA version"):
        parse_nvcc_version(output)


# --- nvcc vs torch's CUDA ----------------------------------------------------------------


def test_cpu_torch_accepts_any_nvcc():
    check_cuda_matches_torch(Version("13.0"), None)
    check_cuda_matches_torch(Version("12.8"), None)


@pytest.mark.parametrize("torch_cuda", ["13.0", "13.2", "13"])
def test_same_major_ok(torch_cuda):
    check_cuda_matches_torch(Version("13.0"), torch_cuda)


def test_different_major_refused_naming_both():
    with pytest.raises(ToolchainError) as info:
        check_cuda_matches_torch(Version("13.0"), "12.8")
    message = str(info.value)
    assert "13.0" in message
    assert "12.8" in message
    assert "CUDA_HOME" in message


# --- where nvcc is looked for ------------------------------------------------------------


def test_nvcc_candidates_order(tmp_path):
    cuda_home = tmp_path / "cuda-home"
    path_dir = tmp_path / "on-path"
    on_path = make_executable(path_dir / "nvcc")
    env = {"CUDA_HOME": str(cuda_home), "PATH": f"{tmp_path / 'empty'}{os.pathsep}{path_dir}"}
    candidates = nvcc_candidates(env)
    assert candidates[:3] == [cuda_home / "bin" / "nvcc", on_path, SYSTEM_NVCC]
    # anything after comes from PyPI's nvidia packages
    assert all(c.name == "nvcc" and "nvidia" in c.parts for c in candidates[3:])


def test_nvcc_candidates_cuda_path_after_cuda_home(tmp_path):
    env = {"CUDA_HOME": str(tmp_path / "a"), "CUDA_PATH": str(tmp_path / "b"), "PATH": ""}
    candidates = nvcc_candidates(env)
    assert candidates[:3] == [tmp_path / "a/bin/nvcc", tmp_path / "b/bin/nvcc", SYSTEM_NVCC]


def test_nvcc_candidates_without_cuda_home_or_path():
    candidates = nvcc_candidates({"PATH": ""})
    assert candidates[0] == SYSTEM_NVCC


def test_nvcc_candidates_uses_os_environ_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert nvcc_candidates()[0] == tmp_path / "bin" / "nvcc"


def test_find_nvcc_prefers_cuda_home(tmp_path):
    fake = make_executable(tmp_path / "bin" / "nvcc")
    assert find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": ""}) == fake


def test_find_nvcc_skips_non_executable(tmp_path, monkeypatch):
    not_exec = tmp_path / "a" / "bin" / "nvcc"
    not_exec.parent.mkdir(parents=True)
    not_exec.write_text("")
    good = make_executable(tmp_path / "b" / "bin" / "nvcc")
    monkeypatch.setattr(toolchain, "cuda_tool_candidates", lambda tool, env=None: [not_exec, good])
    assert find_nvcc({}) == good


@needs_system_nvcc
def test_find_nvcc_falls_back_to_usr_local_cuda(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "path").mkdir()
    env = {"CUDA_HOME": str(tmp_path / "home"), "PATH": str(tmp_path / "path")}
    assert find_nvcc(env) == SYSTEM_NVCC


def test_find_nvcc_nothing_found_explains_every_way(tmp_path, monkeypatch):
    missing = [tmp_path / "nope" / "bin" / "nvcc", tmp_path / "also-not" / "nvcc"]
    monkeypatch.setattr(toolchain, "cuda_tool_candidates", lambda tool, env=None: missing)
    with pytest.raises(ToolchainError) as info:
        find_nvcc({"CUDA_HOME": str(tmp_path / "nope"), "PATH": ""})
    message = str(info.value)
    for hint in ("CUDA_HOME", "PATH", "/usr/local/cuda", "nvidia-cuda-nvcc", "PREBUILD_ARCHS=''"):
        assert hint in message


# --- asking the real nvcc ----------------------------------------------------------------


@needs_system_nvcc
def test_real_nvcc(tmp_path):
    nvcc = Nvcc(find_nvcc({"PATH": ""}))
    toolkit = nvcc.toolkit
    assert toolkit.root.resolve() == SYSTEM_NVCC.resolve().parent.parent
    # Reached through a wrapper script elsewhere (as /usr/local/bin/nvcc is here), the same.
    script = tmp_path / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec {SYSTEM_NVCC} "$@"\n')
    script.chmod(0o755)
    assert Nvcc(script).toolkit == toolkit
    assert any((d / "crt" / "host_config.h").is_file() for d in toolkit.include_dirs), toolkit
    assert any(d.name == "cccl" for d in toolkit.include_dirs) or nvcc.version.major < 13
    assert nvcc.version.major >= 12
    supported = nvcc.supported_archs
    assert Arch(8, 0) in supported
    assert Arch(9, 0) in supported
    assert all(a.suffix == "" for a in supported)
    assert list(supported) == sorted(supported)


# `nvcc --dryrun -x cu -c /dev/null -o /dev/null`, abridged: the system toolkit here, and PyPI's
# nvidia-cuda-nvcc called by a relative path (nvcc then reports relative paths).
SYSTEM_DRYRUN = """\
#$ _NVVM_BRANCH_=nvvm
#$ _SPACE_=
#$ _HERE_=/usr/local/cuda-13.0/bin
#$ _TARGET_DIR_=
#$ _TARGET_DIR_=targets/x86_64-linux
#$ TOP=/usr/local/cuda-13.0/bin/..
#$ INCLUDES="-I/usr/local/cuda-13.0/bin/../targets/x86_64-linux/include"  
#$ SYSTEM_INCLUDES="-isystem" "/usr/local/cuda-13.0/bin/../targets/x86_64-linux/include/cccl"  
#$ LIBRARIES=  "-L/usr/local/cuda-13.0/bin/../targets/x86_64-linux/lib/stubs" "-L/usr/local/cuda-13.0/bin/../targets/x86_64-linux/lib"
#$ gcc -D__CUDA_ARCH_LIST__=750 -E -x c++ "/dev/null" -o "/tmp/tmpxft_null.cpp4.ii"
"""
PYPI_DRYRUN = """\
#$ _HERE_=.venv/lib/python3.11/site-packages/nvidia/cu13/bin
#$ TOP=.venv/lib/python3.11/site-packages/nvidia/cu13/bin/..
#$ INCLUDES="-I.venv/lib/python3.11/site-packages/nvidia/cu13/bin/../include"  
#$ SYSTEM_INCLUDES="-isystem" ".venv/lib/python3.11/site-packages/nvidia/cu13/bin/../include/cccl"  
#$ LIBRARIES=  "-L.venv/lib/python3.11/site-packages/nvidia/cu13/bin/../lib/stubs" "-L.venv/lib/python3.11/site-packages/nvidia/cu13/bin/../lib"
"""


def test_parse_nvcc_dryrun_system_toolkit():
    toolkit = parse_nvcc_dryrun(SYSTEM_DRYRUN, Path("/elsewhere"))
    target = Path("/usr/local/cuda-13.0/targets/x86_64-linux")
    assert toolkit.root == Path("/usr/local/cuda-13.0") and toolkit.bin_dir == Path(
        "/usr/local/cuda-13.0/bin"
    )
    assert toolkit.include_dirs == (target / "include", target / "include" / "cccl")
    assert toolkit.library_dirs == (target / "lib",)
    assert toolkit.stub_dirs == (target / "lib" / "stubs",)  # libcuda.so, for -lcuda


def test_parse_nvcc_dryrun_relative_paths_and_missing_variables():
    site = Path("/work/x/.venv/lib/python3.11/site-packages/nvidia/cu13")
    toolkit = parse_nvcc_dryrun(PYPI_DRYRUN, Path("/work/x"))
    assert toolkit.root == site and toolkit.bin_dir == site / "bin"
    assert toolkit.include_dirs == (site / "include", site / "include" / "cccl")
    assert toolkit.library_dirs == (site / "lib",)
    assert toolkit.stub_dirs == (site / "lib" / "stubs",)
    # Older nvccs print no SYSTEM_INCLUDES; INCLUDES may name several directories.
    minimal = '#$ _HERE_=/c/bin\n#$ TOP=/c\n#$ INCLUDES="-I/c/include" "-I/c/extra"\n'
    assert parse_nvcc_dryrun(minimal, Path("/")).include_dirs == (
        Path("/c/include"),
        Path("/c/extra"),
    )
    with pytest.raises(ToolchainError, match="did not report TOP"):
        parse_nvcc_dryrun("#$ _HERE_=/c/bin\n", Path("/"))


def test_nvcc_failure_is_a_toolchain_error(tmp_path):
    broken = tmp_path / "bin" / "nvcc"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(ToolchainError, match="boom"):
        Nvcc(broken).version
    with pytest.raises(ToolchainError):
        Nvcc(tmp_path / "missing").supported_archs
    with pytest.raises(ToolchainError, match="boom"):
        Nvcc(broken).toolkit


def test_ninja_is_the_packaged_one_whatever_path_holds(tmp_path, monkeypatch):
    """Another ninja first on PATH (a system 1.11 beside the package's 1.13) is not taken: a
    build directory switching between them would be compiled again from scratch."""
    import ninja

    other = tmp_path / "ninja"
    other.write_text("#!/bin/sh\necho 1.0.0\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert toolchain.find_ninja() == str(Path(ninja.BIN_DIR) / "ninja")
    monkeypatch.setattr(ninja, "BIN_DIR", str(tmp_path / "gone"))  # no package binary: PATH's
    assert toolchain.find_ninja() == str(other)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(toolchain.ToolchainError, match="pip install ninja"):
        toolchain.find_ninja()


@pytest.mark.parametrize(
    "cxx, expected",
    [
        ("g++", ([], ["g++"])),
        ("ccache g++", (["ccache"], ["g++"])),
        ("/usr/bin/sccache clang++ -m64", (["/usr/bin/sccache"], ["clang++", "-m64"])),
        ("distcc ccache g++", (["distcc", "ccache"], ["g++"])),
        ("ccache", ([], ["ccache"])),  # ccache alone is the compiler named (masquerade)
        ("'/opt/my gcc/g++'", ([], ["/opt/my gcc/g++"])),
        ("", ([], [])),
        ("g++ 'unclosed", ([], [])),
    ],
)
def test_split_cxx_takes_the_launchers_in_front_of_the_compiler(cxx, expected):
    assert split_cxx(cxx) == expected


def executables(bin_dir: Path, *names: str) -> str:
    bin_dir.mkdir()
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def test_find_cxx_keeps_cxx_with_its_launcher_and_falls_back_only_when_it_is_unset(tmp_path):
    path = executables(tmp_path / "bin", "ccache", "g++", "c++")
    assert find_cxx({"PATH": path, "CXX": "ccache g++ -m64"}) == HostCompiler(
        ("g++", "-m64"), ("ccache",)
    )
    assert find_cxx({"PATH": path, "CXX": "g++"}) == HostCompiler(("g++",))
    assert find_cxx({"PATH": path}) == HostCompiler(("c++",))
    assert find_cxx({"PATH": path, "CXX": "  "}) == HostCompiler(("c++",))
    with pytest.raises(ToolchainError, match="no C\\+\\+ compiler found"):
        find_cxx({"PATH": str(tmp_path)})


@pytest.mark.parametrize(
    "cxx, named",
    [("distcc g++", "distcc"), ("clang++-99", "clang++-99"), ("sccache /opt/x/g++", "/opt/x/g++")],
)
def test_a_cxx_naming_a_missing_program_is_an_error_naming_it(tmp_path, cxx, named):
    path = executables(tmp_path / "bin", "sccache", "g++", "c++")
    with pytest.raises(ToolchainError) as error:
        find_cxx({"PATH": path, "CXX": cxx})
    assert f"names {named}, which is not found on PATH" in str(error.value)
    assert f"CXX={cxx!r}" in str(error.value)


def test_an_unreadable_cxx_is_an_error(tmp_path):
    path = executables(tmp_path / "bin", "g++", "c++")
    with pytest.raises(ToolchainError, match="cannot be read as a command line"):
        find_cxx({"PATH": path, "CXX": "g++ 'unclosed"})


GCC_VERBOSE = """\
ignoring nonexistent directory "/usr/local/include/x86_64-linux-gnu"
#include "..." search starts here:
#include <...> search starts here:
 /usr/include/c++/12
 /usr/include/x86_64-linux-gnu/c++/12
 /usr/lib/gcc/x86_64-linux-gnu/12/include
 /usr/local/include
 /usr/include
End of search list.
"""


def test_the_compilers_own_include_directories_are_read_from_its_verbose_output():
    assert search_dirs(GCC_VERBOSE) == [
        "/usr/include/c++/12",
        "/usr/include/x86_64-linux-gnu/c++/12",
        "/usr/lib/gcc/x86_64-linux-gnu/12/include",
        "/usr/local/include",
        "/usr/include",
    ]
    clang = GCC_VERBOSE.replace(" /usr/include\n", " /Library/Frameworks (framework directory)\n")
    assert search_dirs(clang)[-1] == "/Library/Frameworks"
    assert search_dirs("c++: error: unrecognized option") == []
    # this machine's compiler, asked; a compiler that cannot say: None
    dirs = compiler_include_dirs(find_cxx())
    assert dirs and all(Path(d).is_absolute() for d in dirs)
    assert compiler_include_dirs(HostCompiler(("false",))) is None
    assert compiler_include_dirs(HostCompiler(("/nonexistent/c++",))) is None


def test_the_compile_caches_launcher_replaces_the_users_own():
    assert compile_launcher(None, ("ccache",)) == ("ccache",)
    assert compile_launcher(Path("/w/launcher"), ("ccache",)) == ("/w/launcher",)
    assert compile_launcher(None, ()) == ()


# --- torch, found without importing it -------------------------------------------------------

TORCH_214_VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.14.1+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '5c4886908584029761b579af026dcfb627c84070'
hip: Optional[str] = None
"""


def test_torch_version_file_reads_as_torch_writes_it():
    assert read_torch_version_file(TORCH_214_VERSION_PY) == ("2.14.1+cu130", "13.0")
    cpu = TORCH_214_VERSION_PY.replace("'2.14.1+cu130'", "'2.13.0+cpu'").replace("'13.0'", "None")
    assert read_torch_version_file(cpu) == ("2.13.0+cpu", None)


@pytest.mark.parametrize(
    "text",
    [
        "__version__ = compute()\ncuda = None\n",  # not a literal: torch must be imported
        "cuda = '13.0'\n",  # no version
        "__version__ = '2.14.1'\n",  # no cuda line (a CPU build writes cuda = None)
        "__version__ = '2.14.1'\ncuda = 13\n",
        "__version__ = (\n",  # not Python
    ],
)
def test_torch_version_file_that_does_not_read_so_is_none(text):
    assert read_torch_version_file(text) is None


def test_find_torch_agrees_with_torch_and_does_not_import_it():
    code = (
        "import sys, json; from prebuild.tool.builder.toolchain import find_torch; t = find_torch(); "
        "imported = 'torch' in sys.modules; import torch; "
        "print(json.dumps([t.version_string, t.cuda, imported, torch.__version__, torch.version.cuda,"
        " str(t.include_dirs[0].parent) == torch.__path__[0]]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found, cuda, imported, version, torch_cuda, same_root = json.loads(out.stdout)
    assert (found, cuda, imported, same_root) == (version, torch_cuda, False, True)


def test_find_torch_imports_a_torch_whose_version_file_it_cannot_read(tmp_path):
    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text("__version__ = '.'.join(['2', '12', '0'])\ncuda = '12.8'\n")
    (package / "__init__.py").write_text(
        "from torch import version\n__version__ = version.__version__\n"
    )
    code = "from prebuild.tool.builder.toolchain import find_torch; t = find_torch(); print(t.version, t.cuda)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["2.12.0", "12.8"], out.stderr


def test_find_torch_without_torch_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(toolchain.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ToolchainError, match="torch is not installed.*--no-build-isolation"):
        find_torch()


def test_find_torch_names_a_torch_that_does_not_import_as_missing(tmp_path):
    package = tmp_path / "torch"
    package.mkdir()
    (package / "version.py").write_text("__version__ = compute()\n")
    (package / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: no such file')\n")
    code = (
        "from prebuild.tool.builder.toolchain import ToolchainError, find_torch\n"
        "try:\n    find_torch()\nexcept ToolchainError as e:\n    print('refused:', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.startswith("refused: torch is not installed in this Python"), out.stderr
