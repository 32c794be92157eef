"""The C and C++ runtimes a library needs (prebuild.runtime.c_runtimes): pure functions over
symbol-version names and the dynamic loader's words."""

from __future__ import annotations

import os

from prebuild.runtime import c_runtimes
from prebuild.runtime.c_runtimes import beyond, combined, describe, newest, version_problem


def test_the_newest_version_of_each_runtime_family_is_kept_and_others_left_out():
    names = [
        "GLIBC_2.2.5",
        "GLIBC_2.32",
        "GLIBC_2.14",  # older, read after a newer one
        "GLIBCXX_3.4.9",  # 9 < 29 as numbers, not as text
        "GLIBCXX_3.4.29",
        "CXXABI_1.3.9",
        "GCC_3.0",
        "GOMP_4.0",  # OpenMP's: not a runtime every machine has
        "OMP_1.0",
        "GLIBC_PRIVATE",
        "libtorch_1.0",
    ]
    assert newest(names) == {
        "GLIBC": "2.32",
        "GLIBCXX": "3.4.29",
        "CXXABI": "1.3.9",
        "GCC": "3.0",
    }
    assert newest([]) == {}


def test_needs_combine_and_compare_with_a_floor_version_by_version():
    ours = combined({"GLIBC": "2.17", "GLIBCXX": "3.4.21"}, {"GLIBC": "2.32", "CXXABI": "1.3.9"})
    assert ours == {"GLIBC": "2.32", "GLIBCXX": "3.4.21", "CXXABI": "1.3.9"}
    torch = {"GLIBC": "2.28", "GLIBCXX": "3.4.22", "CXXABI": "1.3.11"}
    assert beyond(ours, torch) == {"GLIBC": "2.32"}
    assert beyond({"GLIBC": "2.28", "GLIBCXX": "3.4.9"}, torch) == {}
    # a family the floor does not name at all is beyond it
    assert beyond({"GCC": "3.0"}, torch) == {"GCC": "3.0"}


def test_what_a_library_needs_is_said_with_the_gcc_a_glibcxx_version_comes_with():
    assert describe({"GLIBC": "2.32", "GLIBCXX": "3.4.29", "GCC": "3.0"}) == (
        "glibc 2.32 and GLIBCXX_3.4.29 (the libstdc++ of GCC 11)"
    )
    assert describe({"GLIBCXX": "3.4.99"}) == "GLIBCXX_3.4.99"  # a version not yet listed
    assert describe({"CXXABI": "1.3.13"}) == "CXXABI_1.3.13 (libstdc++)"
    assert describe({"GCC": "3.0"}) == ""
    assert c_runtimes.gcc_of("3.4.30") == "12" and c_runtimes.gcc_of("3.4.1") is None


def test_the_machine_s_glibc_is_read_from_confstr(monkeypatch):
    have = c_runtimes.machine_glibc()
    assert have is not None and newest([f"GLIBC_{have}"]) == {"GLIBC": have}
    monkeypatch.setattr(os, "confstr", lambda name: "musl 1.2")  # not glibc
    assert c_runtimes.machine_glibc() is None

    def unknown(name):
        raise ValueError(name)

    monkeypatch.setattr(os, "confstr", unknown)
    assert c_runtimes.machine_glibc() is None


def test_the_c_library_s_and_the_cpp_runtime_s_versions_are_read_from_the_loader_s_words():
    glibc = (
        "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by "
        "/venv/lib/python3.11/site-packages/gsplat/csrc.so)"
    )
    said = version_problem(glibc, "prebuild wheel --arch sm_90 gsplat==1.5.3", "2.35")
    assert said == (
        "its libraries need GLIBC_2.38 of the C library, and this machine's (glibc 2.35, "
        "/lib/x86_64-linux-gnu/libc.so.6) is older than the one of the machine that built the "
        "wheel. Build the wheel on this machine, or on one whose glibc is no newer than this "
        "one's (a manylinux_2_28 container, as torch's own wheels are built): "
        "prebuild wheel --arch sm_90 gsplat==1.5.3."
    )
    assert "(/lib/x86_64-linux-gnu/libc.so.6)" in version_problem(glibc, "p")  # glibc unknown
    conda = "/opt/conda/lib/libstdc++.so.6: version `CXXABI_1.3.15' not found (required by x.so)"
    assert "need CXXABI_1.3.15 of the C++ runtime, and" in version_problem(conda, "p")
    assert "(/opt/conda/lib/libstdc++.so.6)" in version_problem(conda, "p")
    cxx = "/usr/lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by x.so)"
    assert "need GLIBCXX_3.4.29 of the C++ runtime (GCC 11's or newer)" in version_problem(cxx, "p")
    assert version_problem("undefined symbol: _ZN3c104cuda9SetDeviceEa", "p") is None
    assert version_problem("libfoo.so: version `FOO_1' not found", "p") is None
