"""prebuild.tool.builder.base: the compile steps read from a project's build output as it comes
(ninja's status lines, as torch's BuildExtension runs it: ``[3/14]`` and the command), and the
runner that writes that output to the build log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from prebuild.tool.builder.base import StepReader, build_step, quiet_runner, shows_a_step

NVCC = (
    "[3/14] /w/cuda-shim/bin/nvcc --generate-dependencies-with-compile --dependency-output "
    "/w/build/backward.o.d -I/w/include -c -c /w/source/gsplat/cuda/csrc/backward.cu -o "
    "/w/build/backward.o -O3 '-DTORCH_EXTENSION_NAME=csrc'"
)


def test_a_ninja_status_line_gives_the_step_and_the_file_it_compiled_or_linked():
    assert build_step(NVCC) == (3, 14, "backward.cu")
    assert build_step(NVCC, "gsplat.csrc") == (3, 14, "gsplat.csrc: backward.cu")
    # under the project's directory, the file's path there: projects repeat names
    # (diffoctreerast compiles two ``forward.cu``)
    assert build_step(NVCC, "", "/w/source") == (3, 14, "gsplat/cuda/csrc/backward.cu")
    assert build_step(NVCC, "", "/w/source/") == (3, 14, "gsplat/cuda/csrc/backward.cu")
    assert build_step(NVCC, "", "/w/sour") == (3, 14, "backward.cu")  # not under it
    assert build_step(NVCC, "", "w/source") == (3, 14, "backward.cu")  # a relative root
    link = "[14/14] c++ /w/build/a.o /w/build/b.o -shared -L/w/lib -lc10 -o /w/build/lib/csrc.so\n"
    assert build_step(link) == (14, 14, "csrc.so")
    assert build_step("[1/1] c++ -c 'unbalanced.cpp") == (1, 1, "'unbalanced.cpp")
    for other in ("building 'x' extension", "[1/x] c++", "a.cu(3): error: [1/2]", ""):
        assert build_step(other) is None


def test_cmakes_status_lines_name_the_file_compiled():
    """NATTEN 0.21.7 builds with CMake's Makefile generator (percentages, no step count);
    CMake's Ninja generator writes ``Building ... object`` after ninja's count."""
    made = "[  5%] Building CUDA object CMakeFiles/natten.dir/autogen/src/cuda/fmha/source_5.cu.o"
    assert build_step(made) == (0, 0, "autogen/src/cuda/fmha/source_5.cu (5 %)")
    assert build_step(made, "natten") == (0, 0, "natten: autogen/src/cuda/fmha/source_5.cu (5 %)")
    link = "[100%] Linking CXX shared library libnatten.so"
    assert build_step(link) == (0, 0, "libnatten.so (100 %)")
    assert build_step("[ 97%] Built target natten") is None
    ninja = "[3/14] Building CXX object CMakeFiles/bnb.dir/csrc/cpu_ops.cpp.o"
    assert build_step(ninja) == (3, 14, "csrc/cpu_ops.cpp")
    assert build_step("[  9%] Building C object odd/a.c.o") == (0, 0, "a.c (9 %)")


def test_a_compile_command_of_a_build_without_ninja_is_a_step_of_unknown_total():
    """torch-points-kernels 0.7.0 builds with ``use_ninja=False``: setuptools prints each
    compiler command before running it."""
    nvcc = "/w/cuda-shim/bin/nvcc -Icuda/include -c cuda/src/knn_gpu.cu -o /w/b/knn_gpu.o -O3"
    assert build_step(nvcc, "tpk.points_cuda") == (0, 0, "tpk.points_cuda: cuda/src/knn_gpu.cu")
    assert build_step("g++ -O3 -fPIC -c ./cpu/src/knn.cpp -o knn.o") == (0, 0, "cpu/src/knn.cpp")
    assert build_step("/w/host-bin/c++ -shared /w/b/knn.o -o /w/lib/x.so") is None  # a link
    assert build_step("note: c++ -c x.cpp") is None


def test_the_steps_of_a_log_count_compiles_without_ninja_and_not_ninjas_failed_command():
    """torchsparse 385f5ce's failed build: under ``FAILED:`` ninja prints the compiler command
    it ran, which was read as a compile of a build without ninja ("[1/?] hashmap_cpu.cpp").
    ninja prints a step's line as the step ends, then ``FAILED:`` if it failed (DPVO's
    failed file was said to be done): that step again, failed."""
    reader = StepReader()
    ninja_log = [
        "building 'torchsparse.backend' extension",
        "[7/24] /w/host-bin/c++ -MMD -c -c /s/devoxelize_cpu.cpp -o /b/devoxelize_cpu.o",
        "[8/24] /w/host-bin/c++ -MMD -c -c /s/hashmap_cpu.cpp -o /b/hashmap_cpu.o -O3",
        "FAILED: [code=1] /b/hashmap_cpu.o",
        "/w/host-bin/c++ -MMD -c -c /s/hashmap_cpu.cpp -o /b/hashmap_cpu.o -O3",
        "/s/hashmap_cpu.hpp:7:10: fatal error: google/dense_hash_map: No such file or directory",
        "FAILED: [code=1] /b/other.o",  # no step line before it: nothing to say
    ]
    steps = [reader.read(line) for line in ninja_log]
    assert [s for s in steps if s] == [
        (7, 24, "torchsparse.backend: devoxelize_cpu.cpp"),
        (8, 24, "torchsparse.backend: hashmap_cpu.cpp"),
        (8, 24, "torchsparse.backend: hashmap_cpu.cpp", True),
    ]
    without_ninja = StepReader()
    plain = ["g++ -c a.cpp -o a.o", "warning: x", "g++ -c b.cpp -o b.o", "g++ a.o b.o -o x.so"]
    assert [s for line in plain if (s := without_ninja.read(line))] == [
        (1, 0, "a.cpp"),
        (2, 0, "b.cpp"),
    ]


def test_a_log_shows_a_step_where_it_shows_a_compile_or_a_link():
    """setuptools' gcc for a C source runs through no shim of prebuild's: its command in the
    log is what says the build compiled."""
    gcc = "gcc -Wall -fPIC -Iinc -I/py/include -c ext/native.c -o build/temp/ext/native.o"
    assert shows_a_step(f"running build_ext\nbuilding 'ext._native' extension\n{gcc}\n")
    assert shows_a_step("[1/2] c++ -c a.cpp -o a.o\n")
    nvcc_version = "/w/cuda-shim/bin/nvcc -V\nCuda compilation tools, release 13.0\n"
    assert not shows_a_step(f"running egg_info\n{nvcc_version}Traceback\nRuntimeError: no GPU\n")


def test_the_runner_logs_everything_and_reports_each_step_with_its_extension(tmp_path):
    script = (
        "print(\"building 'pkg._C' extension\")\n"
        f"print('[1/2] nvcc -c {tmp_path}/csrc/x.cu -o /b/x.o')\n"
        "print('x.cu(3): warning: something')\n"
        "print('[2/2] c++ /b/x.o -shared -o /b/_C.so', flush=True)\n"
        "raise SystemExit(3)\n"
    )
    log = tmp_path / "build.log"
    heard: list[tuple] = []
    run = quiet_runner(log, {"X_SET": "1"}, lambda *step: heard.append(step))
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run([sys.executable, "-c", script], cwd=str(tmp_path))  # as pyproject-hooks runs it
    assert failed.value.returncode == 3
    assert heard == [(1, 2, "pkg._C: csrc/x.cu"), (2, 2, "pkg._C: _C.so")]
    assert log.read_text().splitlines() == [
        "building 'pkg._C' extension",
        f"[1/2] nvcc -c {tmp_path}/csrc/x.cu -o /b/x.o",
        "x.cu(3): warning: something",
        "[2/2] c++ /b/x.o -shared -o /b/_C.so",
    ]
    # the environment reaches the command; without a step listener, only the log is written
    quiet_runner(log, {"X_SET": "yes"})(
        [sys.executable, "-c", "import os; print('X_SET=' + os.environ['X_SET'])"]
    )
    assert log.read_text().splitlines()[-1] == "X_SET=yes"


def test_a_process_the_build_leaves_running_does_not_hold_the_build_open(tmp_path):
    """A compiler cache's server started by the build keeps its output open: the runner
    returns when the build's own process does, with the server still running."""
    import os
    import signal

    log = tmp_path / "build.log"
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('server', p.pid)\nprint('[1/1] c++ -c a.cpp -o a.o', flush=True)\n"
    )
    heard: list[tuple] = []
    quiet_runner(log, {}, lambda *step: heard.append(step))([sys.executable, "-c", script])
    server = int(log.read_text().split()[1])
    try:
        os.kill(server, 0)  # still running: the runner did not wait for it
    finally:
        os.kill(server, signal.SIGKILL)
    assert heard == [(1, 1, "a.cpp")]


def test_without_ninja_the_compiles_are_counted_as_they_start(tmp_path):
    script = (
        "print(\"building 'pkg._C' extension\")\n"
        "print('g++ -O3 -c a.cpp -o a.o')\nprint('a.cpp:1: warning: x')\n"
        "print('/w/bin/nvcc -c b.cu -o b.o')\nprint('g++ -shared a.o b.o -o _C.so')\n"
    )
    heard: list[tuple] = []
    quiet_runner(tmp_path / "log", {}, lambda *step: heard.append(step))(
        [sys.executable, "-c", script]
    )
    assert heard == [(1, 0, "pkg._C: a.cpp"), (2, 0, "pkg._C: b.cu")]


def test_a_step_listener_that_raises_costs_the_progress_only(tmp_path, monkeypatch):
    """Progress is for show: a listener that raises is not called again, no thread's
    traceback reaches the user's terminal, and the build goes on to its end."""
    import threading

    crashed: list = []
    monkeypatch.setattr(threading, "excepthook", crashed.append)
    calls: list[tuple] = []

    def broken(*step):
        calls.append(step)
        raise RuntimeError("a listener's bug")

    script = "print('[1/2] c++ -c a.cpp -o a.o')\nprint('[2/2] c++ -c b.cpp -o b.o')\n"
    log = tmp_path / "build.log"
    quiet_runner(log, {}, broken)([sys.executable, "-c", script])
    assert calls == [(1, 2, "a.cpp")] and crashed == []
    assert log.read_text().splitlines()[-1] == "[2/2] c++ -c b.cpp -o b.o"
