"""`prebuild wheel PROJECT` interrupted while the project's own build runs (a fixture whose
build_ext starts a long child, as a compiler would be): Ctrl-C to prebuild alone or to its
whole process group (a terminal's), or SIGTERM (a scheduler's), exits at once with one line
saying so, no traceback, no process left running, nothing written, and no temporary
directory left behind. A failed build leaves only its log, which the error names.

prebuild is started as a terminal's foreground job is, with SIGINT at its default: a background
job of a non-interactive shell (``pytest ... &``, a CI step's) inherits SIGINT ignored, and
Python then installs no KeyboardInterrupt handler, so Ctrl-C could not reach it at all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from child_processes import gone

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "classic"

pytestmark = pytest.mark.slow  # the CUDA torch venv


def start(python: Path, tmp_path: Path, project: str) -> tuple[subprocess.Popen, Path, Path]:
    temp, pids = tmp_path / "tmp", tmp_path / "pids"
    temp.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "COLUMNS": "200",
        "TMPDIR": str(temp),
        "SLEEPY_PIDS": str(pids),
    }
    proc = subprocess.Popen(
        [
            str(python),
            "-m",
            "prebuild",
            "wheel",
            "--arch",
            "sm_90",
            project,
            "--out",
            str(tmp_path / "dist"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    return proc, temp, pids


def default_sigint() -> None:
    """Run in the child before exec: SIGINT not inherited ignored (see the module's docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    "how", ["SIGINT to prebuild", "SIGINT to the group", "SIGTERM to prebuild"]
)
def test_an_interrupted_build_says_so_stops_everything_and_leaves_nothing(
    cuda_torch_python, tmp_path, how
):
    proc, temp, pids = start(cuda_torch_python, tmp_path, str(FIXTURES / "sleepy_ext"))
    try:
        deadline = time.monotonic() + 300
        while not (pids.exists() and pids.read_text().endswith("\n")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the project's build never started"
            time.sleep(0.1)
        signum = signal.SIGTERM if "SIGTERM" in how else signal.SIGINT
        os.killpg(proc.pid, signum) if "group" in how else os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == (143 if signum == signal.SIGTERM else 130), stderr
    said = [line for line in stderr.splitlines() if line.startswith("interrupted")]
    assert said == [
        "interrupted: no wheel was written (with --build-dir DIR, a run keeps its objects for the "
        "next)"
    ], stderr
    assert "Traceback" not in stderr and "build failed" not in stderr, stderr
    for pid in map(int, pids.read_text().split()):  # the backend and its child, the "compiler"
        assert gone(pid), f"process {pid} still runs after prebuild exited"
    assert list(temp.iterdir()) == []
    assert not (tmp_path / "dist").exists() or list((tmp_path / "dist").iterdir()) == []


def test_a_failed_build_leaves_only_its_log_and_names_it(cuda_torch_python, tmp_path):
    """broken_ext does not compile: the error names the build log, which is all that is left of
    the temporary directory."""
    proc, temp, _ = start(cuda_torch_python, tmp_path, str(FIXTURES / "broken_ext"))
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 1, stderr
    left = list(temp.iterdir())
    assert len(left) == 1 and left[0].is_file() and left[0].name.startswith("prebuild-wheel-"), left
    said = " ".join(stderr.split())
    assert re.search(rf"full log: {re.escape(str(left[0]))}\)", said), said
    assert "undeclared_in_this_kernel" in left[0].read_text()
