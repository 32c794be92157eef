"""A native project's setup.py under `prebuild wheel` packages the libraries prebuild wheel
compiled (PREBUILD_COMPILED) and runs no preflight, compile or nvcc of its own; run by anything
else (pip, cibuildwheel) it compiles itself. (Real builds: test_wheel_build.py, test_source_install.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.builder import flags, setuptools_ext
from prebuild.tool.builder.compile import CompiledLibraries
from prebuild.tool.builder.config import read_config
from prebuild.tool.builder.toolchain import Torch

ROOT = Path(__file__).resolve().parents[3]


def record(root: Path) -> Path:
    for name in ("_C.abi3.so", "_C_cuda.abi3.so"):
        (root / name).write_bytes(b"")
    torch = Torch(Version("2.13.0"), "2.13.0+cpu", None, (), root)
    compiled = CompiledLibraries(
        root / "_C.abi3.so", root / "_C_cuda.abi3.so", None, torch, "13.0", {}
    )
    return compiled.write(root / "compiled.json")


@pytest.fixture
def nothing_compiles(monkeypatch):
    """The setup.py's own preflight, compile and nvcc, each failing the test if used."""

    def refuse(*args, **kwargs):
        raise AssertionError("the setup.py under prebuild wheel must not compile or ask nvcc")

    for name in ("compile_libraries", "compile_through_cache", "find_nvcc"):
        monkeypatch.setattr(setuptools_ext, name, refuse)


def test_under_prebuild_wheel_the_compiled_libraries_are_packaged_as_recorded(
    tmp_path, nothing_compiles
):
    env = flags.BuildOptions(
        archs=parse_arch_list("sm_80"), ptx=False, compiled=record(tmp_path)
    ).to_env()
    options = flags.BuildOptions.from_env(env)
    project = read_config(ROOT)
    compiled = setuptools_ext.compiled_libraries(project, options)
    assert compiled.cuda_library == tmp_path / "_C_cuda.abi3.so"
    assert compiled.torch.version_string == "2.13.0+cpu"  # the manifest's built_with_torch
    cuda = setuptools_ext.build_cuda_version(options)
    assert cuda == Version("13.0")
    assert setuptools_ext.package_version(project, options, cuda) == "0.1.0+cu130.sm80"


def test_a_record_that_is_gone_stops_the_setup_py_with_its_message(tmp_path, nothing_compiles):
    options = flags.BuildOptions(
        archs=parse_arch_list("sm_80"), ptx=False, compiled=tmp_path / "gone.json"
    )
    with pytest.raises(SystemExit, match="prebuild: cannot read the compiled libraries' record"):
        setuptools_ext.compiled_libraries(read_config(ROOT), options)


def test_a_source_build_compiles_itself(monkeypatch):
    """No record (pip, cibuildwheel): the setup.py's own compile, with its own preflight."""
    seen = []
    monkeypatch.setattr(
        setuptools_ext, "compile_through_cache", lambda project, options: seen.append(options)
    )
    options = flags.BuildOptions.from_env({"PREBUILD_ARCHS": "sm_80"})
    assert options.compiled is None
    setuptools_ext.compiled_libraries(read_config(ROOT), options)
    assert seen == [options]
    assert setuptools_ext.package_version(read_config(ROOT), options, None) == "0.1.0+cpu"
