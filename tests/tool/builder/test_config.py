"""prebuild.tool.builder.config: [tool.prebuild] read into typed options, every mistake named
by its key, and prebuild's own pyproject.toml declaring its kernels this way."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from prebuild.runtime.arch import parse_arch_list
from prebuild.tool.builder.config import (
    ConfigError,
    KernelProject,
    declares_kernels,
    parse_config,
    read_config,
)

ROOT = Path(__file__).resolve().parents[3]
PROJECT = {"name": "My-Kernels", "dynamic": ["version"]}


def parse(tool: dict, project: dict = PROJECT, root: Path = Path("/p")) -> KernelProject:
    return parse_config({"version": "1.2.0", **tool}, project, root)


def test_defaults_follow_the_project_name():
    k = parse({})
    assert (k.name, k.version, k.package, k.namespace, k.library) == (
        "My-Kernels",
        "1.2.0",
        "my_kernels",
        "my_kernels",
        "_C",
    )
    assert (
        k.sources == Path("/p/csrc")
        and k.include_dirs == ()
        and k.default_archs is None
        and k.default_ptx
    )
    assert k.torch_target == Version("2.10") and k.selftest is None and not k.unity_build
    assert (k.cpu_library, k.cuda_library, k.simt_library) == (
        "_C.abi3.so",
        "_C_cuda.abi3.so",
        "_C_simt.abi3.so",
    )


def test_every_key_read_and_typed():
    k = parse(
        {
            "package": "pkg.sub",
            "namespace": "ns",
            "sources": "kernels",
            "include-dirs": ["third_party/x"],
            "torch-target": "2.14.1",
            "default-archs": ["sm_90", "80"],
            "default-ptx": False,
            "library": "_ops",
            "selftest": "pkg.sub.checks:cases",
            "unity-build": True,
        }
    )
    assert k.unity_build
    assert (k.package, k.namespace, k.library, k.selftest) == (
        "pkg.sub",
        "ns",
        "_ops",
        "pkg.sub.checks:cases",
    )
    assert k.sources == Path("/p/kernels") and k.include_dirs == (Path("/p/third_party/x"),)
    assert k.torch_target == Version("2.14") and k.default_archs == parse_arch_list("sm_80,sm_90")
    assert parse({"default-archs": "sm_80,sm_90"}).default_archs == parse_arch_list("sm_80,sm_90")
    assert parse({"package": "pkg.sub"}).namespace == "pkg_sub"


@pytest.mark.parametrize(
    "tool, message",
    [
        (
            {"namepsace": "x"},
            "unknown key(s) in [tool.prebuild]: 'namepsace' (did you mean 'namespace'?)",
        ),
        (
            {"package": "my-pkg"},
            "[tool.prebuild] package must be a dotted Python package name, got 'my-pkg'",
        ),
        ({"namespace": "a.b"}, "[tool.prebuild] namespace must be a Python identifier"),
        ({"library": 3}, "[tool.prebuild] library must be a Python identifier, got 3"),
        ({"sources": "../elsewhere"}, "points outside the project"),
        (
            {"sources": "/abs"},
            "[tool.prebuild] sources must be a directory relative to the project",
        ),
        ({"include-dirs": "inc"}, "include-dirs must be a list"),
        ({"torch-target": "2.9"}, "need torch 2.10's stable ABI"),
        ({"torch-target": "soon"}, "torch-target must be a torch version"),
        ({"default-archs": ["sm_8"]}, "default-archs must be a list of CUDA archs"),
        ({"default-archs": []}, "it names no arch"),
        ({"default-ptx": "yes"}, "default-ptx must be true or false"),
        ({"unity-build": 1}, "[tool.prebuild] unity-build must be true or false, got 1"),
        ({"version": "1.0+cu130"}, "prebuild adds the local label itself"),
        ({"version": "one"}, "[tool.prebuild] version must be a version"),
        (
            {"selftest": "pkg.checks"},
            "[tool.prebuild] selftest must be 'package.module:function' (a dotted module path, "
            "a colon, an identifier), got 'pkg.checks'",
        ),
        ({"selftest": "pkg.checks:cases()"}, "selftest must be 'package.module:function'"),
        ({"selftest": "my-pkg.checks:cases"}, "selftest must be 'package.module:function'"),
        ({"selftest": ""}, "selftest must be 'package.module:function'"),
        ({"selftest": ["pkg.checks:cases"]}, "selftest must be 'package.module:function'"),
        ({"self-test": "pkg:cases"}, "'self-test' (did you mean 'selftest'?)"),
    ],
)
def test_mistakes_are_named_by_their_key(tool, message):
    with pytest.raises(ConfigError) as info:
        parse(tool)
    assert message in str(info.value)


def test_the_project_table_must_name_it_and_leave_the_version_to_prebuild():
    with pytest.raises(ConfigError, match="no \\[project\\] name"):
        parse({}, {"dynamic": ["version"]})
    for project in ({"name": "x", "version": "1.0"}, {"name": "x"}):
        with pytest.raises(
            ConfigError,
            match='\\[tool.prebuild\\] version, with "version" in \\[project\\] dynamic',
        ):
            parse({}, project)
    with pytest.raises(ConfigError, match="must be a table"):
        parse_config("csrc", PROJECT, Path("/p"))  # type: ignore[arg-type]


def test_read_config_from_a_file(tmp_path):
    assert not declares_kernels(tmp_path)  # no pyproject.toml at all
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert not declares_kernels(tmp_path)
    with pytest.raises(ConfigError, match="has no \\[tool.prebuild\\] table"):
        read_config(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndynamic = ["version"]\n[tool.prebuild]\nversion = "0.3"\n'
    )
    assert declares_kernels(tmp_path) and read_config(tmp_path).package == "x"
    (tmp_path / "pyproject.toml").write_text("[tool.prebuild\n")
    with pytest.raises(ConfigError, match="cannot read"):
        read_config(tmp_path)


def test_prebuilds_own_kernels_are_declared_in_its_pyproject():
    k = read_config(ROOT)
    assert (k.name, k.package, k.namespace, k.library) == ("prebuild", "prebuild", "prebuild", "_C")
    assert k.sources == ROOT / "csrc" and k.torch_target == Version("2.10") and k.unity_build
    assert (
        k.selftest == "prebuild.ops.selftest:cases"
    )  # `prebuild selftest` finds it in the manifest
