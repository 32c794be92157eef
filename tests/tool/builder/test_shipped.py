"""prebuild.tool.builder.shipped: a library a classic project's source ships already built,
copied into its wheel by its build, is found; one built for a torch (linking it, or holding GPU
code) is what the builder refuses; a vendored library of neither kind is not."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from c_libraries import shared_library

from prebuild.runtime.arch import parse_arch
from prebuild.runtime.manifest import BuiltLibrary
from prebuild.tool.builder.shipped import (
    ShippedLibrary,
    shipped_libraries,
    shipped_message,
    source_libraries,
)
from prebuild.tool.builder.wheel_libraries import read_wheel_libraries


@pytest.fixture
def project(tmp_path) -> tuple[Path, dict, Path]:
    """A source shipping a torch-linked library (a stand-in libtorch.so) and a vendored one,
    and the wheel its build made: both copied, plus an extension it compiled, and one it
    compiled into its package directory, over a library of the same name the source had."""
    libs = tmp_path / "libs"
    libs.mkdir()
    shared_library(libs / "libtorch.so", "int torch_stub(void) { return 1; }\n")
    source = tmp_path / "source" / "pkg" / "lib"
    source.mkdir(parents=True)
    shared_library(
        source / "libprebuilt.so",
        "int torch_stub(void);\nint f(void) { return torch_stub(); }\n",
        f"-L{libs}",
        "-ltorch",
    )
    shared_library(source / "libvendored.so", "int g(void) { return 2; }\n")
    shared_library(source / "_cmake.so", "int old(void) { return 0; }\n")
    (tmp_path / "source" / "build").mkdir()  # an earlier build's outputs are not the source's
    shutil.copy(source / "libvendored.so", tmp_path / "source" / "build" / "_C.so")
    before = source_libraries(tmp_path / "source")
    # The build: it compiles _C.so, and _cmake.so into the source's package directory.
    compiled = shared_library(libs / "_C.so", "int h(void) { return 3; }\n")
    shared_library(source / "_cmake.so", "int made(void) { return 4; }\n")
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(source / "libprebuilt.so", "pkg/lib/libprebuilt.so")
        zf.write(source / "libvendored.so", "pkg/libvendored.so")
        zf.write(source / "_cmake.so", "pkg/lib/_cmake.so")
        zf.write(compiled, "pkg/_C.so")
    return tmp_path / "source", before, wheel


def test_the_libraries_a_source_ships_are_found_and_those_built_for_a_torch_told_apart(project):
    source, before, wheel = project
    assert sorted(p.name for p in before) == ["_cmake.so", "libprebuilt.so", "libvendored.so"]
    libraries = read_wheel_libraries(wheel)
    found = {s.file: s for s in shipped_libraries(before, source, wheel, libraries)}
    # Not _C.so (compiled), nor _cmake.so (compiled over the source's own)
    assert sorted(found) == ["pkg/lib/libprebuilt.so", "pkg/libvendored.so"]
    assert found["pkg/libvendored.so"].source == "pkg/lib/libvendored.so"  # found by name
    assert found["pkg/lib/libprebuilt.so"].links_torch
    assert found["pkg/lib/libprebuilt.so"].built_for_torch
    assert not found["pkg/libvendored.so"].built_for_torch


def test_the_refusal_names_each_library_what_it_was_built_for_and_where_to_build_instead():
    gpu = BuiltLibrary("pkg/_ext.so", "0" * 64, 1, (parse_arch("sm_80"), parse_arch("sm_90")))
    shipped = [
        ShippedLibrary("pkg/_ext.so", "prebuilt/_ext.so", gpu, ("libc10.so", "libm.so.6")),
    ]
    said = shipped_message("pkg-1.0-py3-none-any.whl", shipped, "https://gitlab.com/me/pkg")
    assert said.startswith(
        "pkg-1.0-py3-none-any.whl: its build does not compile these libraries, it copies them "
        "from its source, where they ship already built: pkg/_ext.so (the source's "
        "prebuilt/_ext.so: GPU code for sm_80, sm_90; links libc10.so)."
    )
    assert "Build the project from its repository (https://gitlab.com/me/pkg)" in said
    assert said.endswith("No wheel was written.")
    assert "from the repository where they are compiled" in shipped_message("w", shipped, None)
