"""runtime_floor: a wheel needing a newer glibc or libstdc++ than its torch is said at build
time; the needs are read from the libraries' symbol versions (inspection.runtime_needs), here of
libraries the tests compile and link against a library defining a version of its own."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from c_libraries import shared_library

from prebuild.tool.builder.runtime_floor import floor_note, torch_runtime, wheel_runtime
from prebuild.tool.builder.toolchain import find_torch
from prebuild.tool.inspection import runtime_needs

TORCH = {"GLIBC": "2.28", "GLIBCXX": "3.4.22", "CXXABI": "1.3.11", "GCC": "3.4"}


@pytest.fixture(scope="module")
def needing(tmp_path_factory) -> Path:
    """A library calling a function its dependency defines at GLIBCXX_3.4.999 (as a
    libstdc++ newer than any would): its version reference is the one a newer GCC leaves."""
    root = tmp_path_factory.mktemp("versions")
    (root / "versions.map").write_text("GLIBCXX_3.4.999 { global: newer_cxx; local: *; };\n")
    shared_library(
        root / "dep" / "libnewcxx.so.6",
        "int newer_cxx(void) { return 1; }\n",
        f"-Wl,--version-script={root / 'versions.map'}",
    )
    return shared_library(
        root / "libuser.so",
        "int newer_cxx(void);\nint user(void) { return newer_cxx(); }\n",
        f"-L{root / 'dep'}",
        "-l:libnewcxx.so.6",
    )


def test_a_library_s_needs_are_the_newest_version_of_each_family_it_references(needing):
    needs = runtime_needs(needing.read_bytes())
    assert needs["GLIBCXX"] == "3.4.999"
    with needing.open("rb") as stream:  # an open file reads the same
        assert runtime_needs(stream) == needs
    assert runtime_needs(b"not an ELF file") == {}


def test_a_wheel_s_and_torch_s_needs_are_those_of_all_their_libraries(needing, tmp_path):
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(needing, "demo/_C.so")
        zf.writestr("demo/__init__.py", "")
    assert wheel_runtime(wheel)["GLIBCXX"] == "3.4.999"
    lib = tmp_path / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_cpu.so").write_bytes(needing.read_bytes())
    (lib / "libother.so").write_bytes(b"not torch's: not read")
    assert torch_runtime(lib)["GLIBCXX"] == "3.4.999"
    # torch itself (read, not loaded) names glibc's and libstdc++'s versions
    real = torch_runtime(find_torch().library_dir)
    assert {"GLIBC", "GLIBCXX"} <= real.keys(), real


def test_a_wheel_needing_more_than_torch_is_said_with_what_each_needs():
    ours = {"GLIBC": "2.32", "GLIBCXX": "3.4.29", "CXXABI": "1.3.9", "GCC": "3.0"}
    assert floor_note(ours, TORCH, "2.13.0+cpu") == (
        "it needs glibc 2.32 and GLIBCXX_3.4.29 (the libstdc++ of GCC 11), where torch "
        "2.13.0+cpu itself needs glibc 2.28 and GLIBCXX_3.4.22 (the libstdc++ of GCC 6): "
        "machines that run this torch with an older glibc or libstdc++ cannot load it (a "
        "manylinux_2_28 container, where torch's wheels are built, builds one that loads "
        "wherever torch does)"
    )
    only_glibc = floor_note({"GLIBC": "2.34", "GLIBCXX": "3.4.21"}, TORCH, "2.14.1+cu130")
    assert only_glibc.startswith("it needs glibc 2.34, where torch 2.14.1+cu130 itself needs ")
    assert "with an older glibc cannot" in only_glibc
    cxxabi = floor_note({"CXXABI": "1.3.13"}, TORCH, "2.14.1")
    assert "needs CXXABI_1.3.13 (libstdc++), where torch" in cxxabi
    assert "with an older libstdc++ cannot" in cxxabi


def test_a_wheel_needing_no_more_than_torch_or_torch_unknown_is_not_said():
    assert floor_note({"GLIBC": "2.17", "GLIBCXX": "3.4.22"}, TORCH, "2.13.0") is None
    assert floor_note({"GCC": "7.0.0"}, TORCH, "2.13.0") is None  # libgcc_s's: not said apart
    assert floor_note({"GLIBC": "2.40"}, {}, "2.13.0") is None
