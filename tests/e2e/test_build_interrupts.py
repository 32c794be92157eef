"""`prebuild wheel` interrupted or run twice at once: never a partial or corrupt wheel.

- killed with SIGKILL in the middle of compiling, it leaves nothing in the output directory,
  and the next runs complete the build;
- two runs started at once on one checkout both succeed: the second waits for the first's
  lock (filelock, OS-level, so a killed run leaves no stale lock) and then only packages;
- every wheel's manifest sha256 entries match the files inside it.
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

ROOT = Path(__file__).resolve().parents[2]
PREBUILD = Path(sys.executable).parent / "prebuild"


def start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(PREBUILD), *args],
        cwd=ROOT,
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
    tmp_path, objects_with_cpu_library
):
    """One compile serves both checks: the killed build's objects directory is where the
    two concurrent runs resume. The CPU library (compiled before any CUDA code, never
    interrupted here) comes from the shared objects: the CUDA compile is what is killed."""
    out, objects = tmp_path / "dist", objects_with_cpu_library
    args = ("wheel", "--arch", "sm_80", "--out", str(out), "--build-dir", str(objects))
    proc = start_cli(*args)
    try:
        # nvcc is running once its object directory exists and the CPU library is linked.
        wait_for(
            lambda: any((objects / "cuda").glob("*/obj")) or proc.poll() is not None,
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
    first, second = start_cli(*args), start_cli(*args)
    results = [p.communicate(timeout=900) for p in (first, second)]
    for p, (stdout, stderr) in zip((first, second), results):
        assert p.returncode == 0, stdout + stderr
    assert any("waiting for another build" in stderr for _, stderr in results), results
    assert_complete_wheels(out, 1)
