"""run_time_compiles: a wheel's libraries that compile GPU code themselves when they run (tutel
0.3's tutel_custom_kernel: NVRTC linked, nvcc run by execl, USE_NVRTC read), said in the
summary. A real library here, compiled by gcc, in a wheel-like zip."""

from __future__ import annotations

import subprocess
import zipfile

from prebuild.tool.builder.run_time_compiles import (
    RunTimeCompile,
    run_time_compile,
    run_time_compiles,
    run_time_note,
)

TUTEL = "tutel_custom_kernel.cpython-311-x86_64-linux-gnu.so"


def test_a_library_linking_nvrtc_or_running_nvcc_compiles_when_it_runs():
    data = b"...USE_NVRTC\0bin/nvcc\0Failed to use NVRTC for JIT compilation..."
    found = run_time_compile(
        TUTEL, ("libc10.so", "libnvrtc.so.13"), frozenset({"execl", "fork", "_ZN3c104cuda"}), data
    )
    assert found == RunTimeCompile(TUTEL, "libnvrtc.so.13", "execl", ("USE_NVRTC",))
    # NVRTC alone; a program run that names no nvcc; neither
    assert run_time_compile("a.so", ("libnvrtc.so.12",), frozenset(), b"") == RunTimeCompile(
        "a.so", "libnvrtc.so.12", None, ()
    )
    assert run_time_compile("a.so", ("libc.so.6",), frozenset({"popen"}), b"ls -l") is None
    assert run_time_compile("a.so", ("libcudart.so.13",), frozenset(), b"nvcc") is None


def test_the_note_says_how_each_library_compiles():
    note = run_time_note([RunTimeCompile(TUTEL, "libnvrtc.so.13", "execl", ("USE_NVRTC",))])
    assert note.startswith("its libraries compile GPU code themselves when they run, on each ")
    assert (
        f"{TUTEL} runs nvcc itself (it names nvcc and calls execl), which needs the CUDA toolkit "
        "on every machine that runs it, and links NVRTC (libnvrtc.so.13: compiles in the "
        "process, no toolkit needed); it reads USE_NVRTC, which may choose NVRTC." in note
    )
    assert "nvcc" not in run_time_note([RunTimeCompile("a.so", "libnvrtc.so.12", None, ())])


def test_the_wheel_s_libraries_are_read(tmp_path):
    source = tmp_path / "k.c"
    source.write_text(
        "#include <unistd.h>\n"
        'int compile(const char* f) { return execl("/usr/local/cuda/bin/nvcc", "nvcc", f, 0); }\n'
    )
    library = tmp_path / "k.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    wheel = tmp_path / "k-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("k/_k.so", library.read_bytes())
        zf.writestr("k/__init__.py", "# nvcc")
    assert run_time_compiles(wheel) == [RunTimeCompile("k/_k.so", None, "execl", ())]
