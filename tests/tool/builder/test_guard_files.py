"""guard_files.py: what a classic wheel gets so that its guard runs at start-up."""

from __future__ import annotations

import ast
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from prebuild import runtime
from prebuild.tool.builder.guard_files import (
    build_spec,
    extension_modules,
    guard_files,
    guard_package,
    module_name,
    top_level_names,
)


def test_names_the_wheel_installs():
    names = [
        "gsplat/__init__.py",
        "gsplat/csrc.so",
        "gsplat/cuda/_backend.py",
        "top_ext.cpython-311-x86_64-linux-gnu.so",
        "helper.py",
        "gsplat-1.5.3.dist-info/METADATA",
        "gsplat-1.5.3.data/scripts/x",
        "_prebuild_guard_gsplat/classic_guard.py",
        "_prebuild_guard_gsplat.pth",
        "not-an-identifier/x.py",
    ]
    assert top_level_names(names) == ["gsplat", "helper", "top_ext"]
    assert module_name("gsplat/csrc.so") == "gsplat.csrc"
    assert module_name("a/b/_C.cpython-311-x86_64-linux-gnu.so") == "a.b._C"
    assert module_name("top_ext.abi3.so") == "top_ext"
    assert (
        guard_package("Diff-Gaussian.Rasterization")
        == "_prebuild_guard_diff_gaussian_rasterization"
    )


def test_the_build_spec_named_in_messages(tmp_path):
    assert build_spec("gsplat==1.5.3", "gsplat", "1.5.3") == "gsplat==1.5.3"
    url = "git+https://github.com/rahul-goel/fused-ssim@abc123"
    assert build_spec(url, "fused_ssim", "1.0") == url
    # a local source means nothing on another machine
    assert build_spec(str(tmp_path), "plain_ext", "0.1") == "plain_ext==0.1"


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_extension_modules_are_the_libraries_python_imports(tmp_path):
    """Only a library exporting PyInit_<name> is an extension module (the guard imports it to
    say why it fails); a plain shared library beside it is loaded by other means."""
    built = {}
    for name, code in {
        "csrc.so": "void *PyInit_csrc(void) { return 0; }",
        "libhelper.so": "int helper(void) { return 1; }",
        "knn.so": "void *PyInit_knn(void) { return 0; }",
    }.items():
        (tmp_path / "x.c").write_text(code + "\n")
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-o", str(tmp_path / name), str(tmp_path / "x.c")],
            check=True,
        )
        built[name] = (tmp_path / name).read_bytes()
    wheel = tmp_path / "proj-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("proj/__init__.py", "")
        zf.writestr("proj/csrc.so", built["csrc.so"])
        zf.writestr("proj/libhelper.so", built["libhelper.so"])
        zf.writestr("proj-1.0.dist-info/METADATA", "")
    assert extension_modules(wheel) == ["proj.csrc"]

    files = guard_files(wheel, "proj", "1.0", "proj-1.0+pt214.dist-info", "proj==1.0")
    runtime_names = {Path(p).name for p in runtime.source_files()}
    assert {p for p in files if p.startswith("_prebuild_guard_proj/")} == {
        f"_prebuild_guard_proj/{n}" for n in runtime_names
    }
    (line,) = files["_prebuild_guard_proj.pth"].splitlines()
    assert line.startswith("import _prebuild_guard_proj.classic_guard as guard; guard.install(")
    config = ast.literal_eval(line[line.index("install(") + len("install(") : -1])
    assert config == {
        "distribution": "proj",
        "version": "1.0",
        "packages": ["proj"],
        "modules": ["proj.csrc"],
        "manifest": "proj-1.0+pt214.dist-info/prebuild.json",
        "build": "proj==1.0",
        "jit": {},
    }

    # A project compiling when first used: those compiles' libraries in the guard's jit folder
    # (jit_ahead.py), served by the name given load() and the key of the call
    first_use = tmp_path / "proj-1.0-cp311-cp311-linux_x86_64-2.whl"
    with zipfile.ZipFile(first_use, "w") as zf:
        zf.writestr("proj/__init__.py", "")
        zf.writestr("_prebuild_guard_proj/jit/knn.so", built["knn.so"])
        zf.writestr("proj-1.0.dist-info/METADATA", "")
    served = {"knn": [{"path": "_prebuild_guard_proj/jit/knn.so", "key": "0123abcd"}]}
    files = guard_files(first_use, "proj", "1.0", "proj-1.0+pt214.dist-info", "proj==1.0", served)
    (line,) = files["_prebuild_guard_proj.pth"].splitlines()
    config = ast.literal_eval(line[line.index("install(") + len("install(") : -1])
    assert config["packages"] == ["proj"]  # the guard's folder is none of the project's
    assert config["modules"] == ["_prebuild_guard_proj.jit.knn"]
    assert config["jit"] == served
