"""debug_info: a classic wheel's libraries stripped of the debug sections Python's -g gave them
(real ELF libraries compiled here, real strip)."""

from __future__ import annotations

import zipfile

from c_libraries import library_wheel, shared_library
from wheel.wheelfile import WheelFile

from prebuild.tool.builder.debug_info import Stripped, debug_bytes, strip_wheel
from prebuild.tool.inspection import dynamic_symbols

SOURCE = "".join(f"int f{i}(int x) {{ return x * {i} + {i}; }}\n" for i in range(200))


def wheel_of(tmp_path, *options: str):
    library = shared_library(tmp_path / "lib" / "_ops.so", SOURCE, *options)
    return library_wheel(tmp_path, library, "pkg/_ops.so"), library.read_bytes()


def test_debug_sections_are_stripped_and_the_symbols_kept(tmp_path):
    wheel, data = wheel_of(tmp_path, "-g")
    assert debug_bytes(data) > 0
    stripped = strip_wheel(wheel, tmp_path / "out")
    assert stripped.wheel == tmp_path / "out" / wheel.name  # its name, its tags
    with WheelFile(stripped.wheel) as wf:  # reading checks every file against RECORD
        library = wf.read("pkg/_ops.so")
    assert debug_bytes(library) == 0
    assert dynamic_symbols(library)[0] == dynamic_symbols(data)[0]  # f0 ... f199 still there
    assert stripped.before == len(data) and stripped.after == len(library) < len(data)
    note = stripped.note()
    assert note.startswith("debug information stripped from its libraries (")
    assert note.endswith("--no-strip keeps it")


def test_a_wheel_without_debug_sections_is_the_wheel_given(tmp_path):
    wheel, data = wheel_of(tmp_path, "-g0")
    assert debug_bytes(data) == 0
    assert strip_wheel(wheel, tmp_path / "out") == Stripped(wheel)
    assert Stripped(wheel).note() == ""
    # compiled without it by the shim: said, with what was still stripped where there was some
    assert Stripped(wheel, left_out=3).note() == (
        "debug information left out of 3 compiles asking for it (-g0 after a C++ compile's -g, "
        "nvcc's -g dropped), a third less compile time: symbols and code are as built, "
        "--no-strip keeps it"
    )
    both = Stripped(wheel, 2_000_000, 500_000, left_out=1).note()
    assert both.startswith("debug information left out of 1 compile asking for it (")
    assert "and stripped from its libraries (2.0 MB -> 0.5 MB): " in both
    assert not (tmp_path / "out").exists()
    assert debug_bytes(b"not ELF") == 0


def test_without_strip_the_wheel_keeps_its_debug_information_and_says_why(tmp_path, monkeypatch):
    wheel, _ = wheel_of(tmp_path, "-g")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    stripped = strip_wheel(wheel, tmp_path / "out")
    assert stripped.wheel == wheel
    assert stripped.note() == (
        "its libraries keep their debug information: no `strip` (binutils) on PATH"
    )
    with zipfile.ZipFile(wheel) as zf:
        assert debug_bytes(zf.read("pkg/_ops.so")) > 0
