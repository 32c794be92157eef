"""prebuild.tool.builder.processes: an interrupt stops the child's whole tree (a backend, its
ninja, the compilers), not the child alone, so no compiler keeps writing into a build
directory that is about to be removed."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prebuild.tool.builder import processes


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    return processes._alive(pid)


def test_an_interrupt_stops_the_grandchildren_too(tmp_path):
    # Like a backend running ninja running compilers: a shell whose children run in the
    # background, one of them ignoring SIGTERM (it must then be killed).
    pids = tmp_path / "pids"
    script = (
        f"sleep 300 & echo $! >> {pids}; "
        f"sh -c 'trap \"\" TERM; sleep 300 & echo $! >> {pids}; wait' & echo $! >> {pids}; wait"
    )
    with pytest.raises(KeyboardInterrupt):
        with processes.popen(["sh", "-c", script]) as proc:
            wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 3)
            tree = processes.descendants(proc.pid)
            assert {int(p) for p in pids.read_text().split()} <= set(tree)
            raise KeyboardInterrupt
    assert proc.returncode is not None
    for pid in [proc.pid, *map(int, pids.read_text().split())]:
        wait_for(lambda pid=pid: not alive(pid), timeout=15)


def test_run_is_subprocess_run(tmp_path):
    done = processes.run(
        [
            sys.executable,
            "-c",
            "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
        ],
        capture_output=True,
        text=True,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    with pytest.raises(subprocess.CalledProcessError):
        processes.run(["false"], check=True)
    with open(tmp_path / "log", "w") as log:
        processes.run(
            ["sh", "-c", "echo one; echo two >&2"], stdout=log, stderr=subprocess.STDOUT, check=True
        )
    assert (tmp_path / "log").read_text() == "one\ntwo\n"


def test_a_command_name_with_parentheses_and_spaces_is_read(tmp_path):
    odd = tmp_path / "a) (b c"
    shutil.copy(shutil.which("sleep"), odd)

    def comm(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""

    with processes.popen(["sh", "-c", f"'{odd}' 300 & wait"]) as proc:
        # Until the child has exec'd (under load sh's fork is seen first, named "sh").
        wait_for(lambda: [c for c in processes.descendants(proc.pid) if comm(c) != "sh"])
        (child,) = processes.descendants(proc.pid)
        assert comm(child).startswith("a) (b")
        processes.stop_tree(proc.pid)
    assert not alive(child)
    assert proc.returncode == -signal.SIGTERM
