"""prebuild.tool.installed: prebuild's own install and other projects' wheels found among the
installed distributions (made-up ones on a temporary sys.path), their libraries checked, and
loaded in a child by prebuild.tool.doctor.load_checks."""

from __future__ import annotations

import importlib.machinery
import json
from pathlib import Path

from prebuild.runtime.manifest import BuiltLibrary, Library, Manifest, ProjectManifest
from prebuild.tool.doctor.load_checks import load_project
from prebuild.tool.installed import InstalledProject, extension_module, installed_projects

SO = "plain_ext/_C.cpython-311-x86_64-linux-gnu.so"


def loaded_projects() -> list[InstalledProject]:
    """What `prebuild doctor` checks: every installed project, each loaded in a child."""
    return [load_project(p) for p in installed_projects()]


def test_extension_module_names():
    assert extension_module(SO) == "plain_ext._C"
    assert extension_module("fused_ssim_cuda.cpython-311-x86_64-linux-gnu.so") == "fused_ssim_cuda"
    assert extension_module("pkg/_C.abi3.so") == "pkg._C"
    assert extension_module("pkg/lib/libfoo.so.1") is None
    assert extension_module("my-pkg/_C.abi3.so") is None  # not importable as a module path


def test_installed_projects_finds_every_distribution_with_a_prebuild_manifest(
    tmp_path, monkeypatch
):
    """A made-up installed project: a real extension module (the stdlib's _bisect, standing
    in for a CUDA extension) and a plain shared library (not imported), found by its
    .dist-info/prebuild.json, its module imported in a child after torch."""
    import _bisect
    import hashlib

    site = tmp_path / "site"
    (site / "fake_ext").mkdir(parents=True)
    files = {
        f"fake_ext/_bisect{importlib.machinery.EXTENSION_SUFFIXES[0]}": Path(
            _bisect.__file__
        ).read_bytes(),
        "fake_ext/libhelper.so": (
            Path(__file__).parents[2] / "src" / "prebuild" / "_C.abi3.so"
        ).read_bytes(),
    }
    for name, data in files.items():
        (site / name).write_bytes(data)
    libs = tuple(
        BuiltLibrary(name, hashlib.sha256(data).hexdigest(), len(data))
        for name, data in files.items()
    )
    manifest = ProjectManifest(
        kind="classic",
        torch="2.13.0+cpu",
        torch_cuda=None,
        cuda="13.0",
        python_tag="cp311-cp311-linux_x86_64",
        sass_archs=(),
        ptx_archs=(),
        libraries=libs,
    )
    info = site / "fake_ext-1.0+pt213.cu130.sm90.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-ext\nVersion: 1.0+pt213.cu130.sm90\n"
    )
    (info / "prebuild.json").write_text(manifest.to_json())
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))  # for the child that imports it
    (found,) = loaded_projects()
    assert (found.name, found.problem, found.modules, found.load_error) == (
        "fake-ext",
        "",
        ("fake_ext._bisect",),
        "",
    )
    # what its libraries need of the C runtime, read from their symbol versions: for doctor
    from prebuild.runtime.c_runtimes import combined
    from prebuild.tool.inspection import runtime_needs

    assert found.runtime_needs["GLIBC"]
    assert found.runtime_needs == combined(*(runtime_needs(d) for d in files.values()))
    (site / "fake_ext" / "libhelper.so").write_bytes(b"\x7fELF broken")
    (damaged,) = loaded_projects()
    assert (
        damaged.problem.startswith("fake_ext/libhelper.so: damaged: ")
        and damaged.manifest == manifest
    )
    assert damaged.load_error is None  # not imported when damaged
    (site / "fake_ext" / "libhelper.so").unlink()
    (missing,) = loaded_projects()
    assert "listed in the manifest but missing" in missing.problem and missing.modules == ()


def test_installed_native_projects_are_found_checked_and_loaded_by_their_own_loader(
    tmp_path, monkeypatch
):
    """A made-up installed native project: prebuild's own CPU library under another package
    name, with the loader copied in as a build does; found through its files (RECORD)."""
    import hashlib

    from prebuild.tool.builder.setuptools_ext import vendor_runtime

    site = tmp_path / "site"
    package = site / "demo"
    package.mkdir(parents=True)
    data = (Path(__file__).parents[2] / "src" / "prebuild" / "_C.abi3.so").read_bytes()
    (package / "_C.abi3.so").write_bytes(data)
    (package / "__init__.py").write_text("")
    vendor_runtime(package)
    Manifest(
        package_version="0.3.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        package="demo",
        op_namespace="prebuild",
        libraries=(Library("_C.abi3.so", "cpu", hashlib.sha256(data).hexdigest(), len(data)),),
    ).write(package)
    info = site / "demo-0.3.0+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 0.3.0+cpu\n")
    files = [p.relative_to(site) for p in package.rglob("*") if p.is_file()]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files) + f"{info.name}/RECORD,,\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    (found,) = [p for p in loaded_projects() if p.name == "demo"]
    assert isinstance(found.manifest, Manifest) and found.problem == "" and found.load_error == ""
    assert found.runtime_needs["GLIBC"]  # its library's symbol versions, read
    (package / "_C.abi3.so").write_bytes(data[:-1])
    (damaged,) = [p for p in loaded_projects() if p.name == "demo"]
    assert "_C.abi3.so" in damaged.problem and damaged.load_error is None


def test_an_editable_native_project_is_found_in_its_source(tmp_path, monkeypatch):
    """`pip install -e .` of a native project (the README's test command): its RECORD lists
    only the .pth that puts src/ on sys.path, so its manifest is found through top_level.txt
    in its source; without PEP 610's editable mark nothing is guessed."""
    import hashlib

    source, site = tmp_path / "project" / "src", tmp_path / "site"
    package = source / "editable_demo"
    package.mkdir(parents=True)
    data = (Path(__file__).parents[2] / "src" / "prebuild" / "_C.abi3.so").read_bytes()
    (package / "_C.abi3.so").write_bytes(data)
    (package / "__init__.py").write_text("")
    Manifest(
        package_version="0.1.0+cpu",
        torch_target="2.13",
        built_with_torch="2.13.0+cpu",
        cuda_version=None,
        package="editable_demo",
        op_namespace="editable_demo",
        libraries=(Library("_C.abi3.so", "cpu", hashlib.sha256(data).hexdigest(), len(data)),),
    ).write(package)
    info = site / "editable_demo-0.1.0+cpu.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: editable-demo\nVersion: 0.1.0+cpu\n"
    )
    (info / "top_level.txt").write_text("editable_demo\n")
    (site / "__editable__.editable_demo-0.1.0+cpu.pth").write_text(f"{source}\n")
    (info / "RECORD").write_text(
        f"__editable__.editable_demo-0.1.0+cpu.pth,,\n{info.name}/RECORD,,\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(source))  # what the .pth does at startup
    assert [p.name for p in installed_projects() if p.name == "editable-demo"] == []
    (info / "direct_url.json").write_text(
        json.dumps({"dir_info": {"editable": True}, "url": f"file://{source.parent}"})
    )
    (found,) = [p for p in installed_projects() if p.name == "editable-demo"]
    assert (
        isinstance(found.manifest, Manifest)
        and found.manifest.package == "editable_demo"
        and found.problem == ""
    )
