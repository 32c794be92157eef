"""`prebuild wheel` interrupted or run twice at once: never a partial or corrupt wheel.

- killed with SIGKILL in the middle of compiling, it leaves nothing in the output directory,
  and the next runs complete the build;
- two runs started at once on one checkout both succeed: the second waits for the first's
  lock (filelock, OS-level, so a killed run leaves no stale lock) and then only packages;
- every wheel's manifest sha256 entries match the files inside it.

The project built is the one ``prebuild new`` scaffolds (``small_native_project``): the subject
is the tool, and its one CUDA file keeps nvcc busy for seconds, long enough to be killed in.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from prebuild.tool.inspection import read_wheel_manifest

pytestmark = pytest.mark.slow

PREBUILD = Path(sys.executable).parent / "prebuild"


def start_cli(project: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(PREBUILD), *args],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def nvcc_running(session: int) -> bool:
    """Whether an nvcc runs in session ``session`` (a build started by ``start_cli`` leads its
    own; ninja puts each command in a process group of its own, but in the same session), read
    from Linux's /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # the process may end while it is read
            sid = int(stat.read_text().rpartition(")")[2].split()[3])
            name = (stat.parent / "comm").read_text().strip()
        except (OSError, ValueError, IndexError):
            continue
        if sid == session and name == "nvcc":
            return True
    return False


def assert_complete_wheels(out: Path, count: int) -> list[Path]:
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == count, sorted(p.name for p in out.iterdir())
    leftovers = [p.name for p in out.iterdir() if p.suffix != ".whl"]
    assert leftovers == [], f"partial files left in the output directory: {leftovers}"
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            assert zf.testzip() is None  # every member's CRC holds
        read_wheel_manifest(wheel)  # raises unless every library matches its sha256
    return wheels


def test_killed_mid_compile_leaves_no_wheel_then_two_runs_at_once_complete_it(
    tmp_path, small_native_project
):
    """One compile serves both checks: the killed build's objects directory is where the
    two concurrent runs resume. The CPU library is compiled before any CUDA code (never
    interrupted here): the CUDA compile is what is killed."""
    project = small_native_project(tmp_path / "demo")
    out, objects = tmp_path / "dist", tmp_path / "objects"
    args = ("wheel", "--arch", "sm_80", "--out", str(out), "--build-dir", str(objects))
    proc = start_cli(project, *args)
    try:
        # The CUDA compile runs once its object directory exists (made after the CPU library is
        # linked) and an nvcc is in the build's session (before it, nvcc was only asked
        # its version and archs).
        wait_for(
            lambda: (
                (any((objects / "cuda").glob("*/obj")) and nvcc_running(proc.pid))
                or proc.poll() is not None
            ),
            timeout=300,
            what="nvcc to start",
        )
        assert proc.poll() is None, "the build finished before it could be interrupted"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not out.exists() or list(out.iterdir()) == []
    assert not list((objects / "cuda").glob("*/_C_cuda.abi3.so"))  # it was killed mid-compile

    # The next runs complete the build; two at once: the second waits for the first's lock
    # (the killed run left none behind), then finds the objects compiled and only packages.
    first, second = start_cli(project, *args), start_cli(project, *args)
    results = [p.communicate(timeout=900) for p in (first, second)]
    for p, (stdout, stderr) in zip((first, second), results):
        assert p.returncode == 0, stdout + stderr
    assert any("waiting for another build" in stderr for _, stderr in results), results
    assert_complete_wheels(out, 1)
