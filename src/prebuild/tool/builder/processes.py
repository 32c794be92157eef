"""The build's child processes, and stopping all of them when the build is interrupted.

A build runs a tree of processes: a PEP 517 backend, torch's or prebuild's ninja under it,
and the compilers under ninja. They stay in prebuild's process group, so that whatever
reaches the whole group (a terminal's Ctrl-C, a scheduler's kill) reaches them all. An
interrupt that reaches prebuild alone (``kill -INT PID``, or SIGTERM turned into one by the
CLI) must not leave compilers running behind it, writing into a directory that is about to
be deleted: ``popen`` stops the child's whole tree before the interrupt goes on.

The tree is read from ``/proc`` (prebuild builds on Linux), not with psutil: the GPU machines'
images the builds must run on have no psutil, and this is all of what it would do here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, None when it is gone. The command name in
    ``/proc/PID/stat`` may hold spaces and parentheses, so the fields are read after the last ')'."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first, then theirs), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return (
        stat is not None and stat[0] != "Z"
    )  # a zombie has exited: only its parent's wait is left


def stop_tree(pid: int, grace: float = 5.0) -> None:
    """SIGTERM ``pid`` and everything below it; SIGKILL what is still running after ``grace`` s."""
    tree = [pid, *descendants(pid)]
    for target in tree:
        try:
            os.kill(target, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.05)
    for target in [*tree, *descendants(pid)]:
        if _alive(target):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextmanager
def popen(cmd: Sequence[str], **kwargs) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen`` whose whole tree is stopped when the ``with`` body raises
    (KeyboardInterrupt included) before it exits. Leaving the block waits for the child."""
    with subprocess.Popen(list(cmd), **kwargs) as proc:
        try:
            yield proc
        except BaseException:
            stop_tree(proc.pid)
            raise


def run(cmd: Sequence[str], *, check: bool = False, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` (``stdout``/``stderr``/``capture_output``/``text``/``env``/``cwd`` as
    there), stopping the child's tree on an interrupt instead of killing the child alone and
    leaving its compilers running."""
    if kwargs.pop("capture_output", False):
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with popen(cmd, **kwargs) as proc:
        out, err = proc.communicate()
    result = subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result
