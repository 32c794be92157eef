"""Processes measured: the wall time and peak memory (RSS summed over the process tree, sampled
from /proc) of one command, a fresh interpreter's own timing, and many interpreters started at
once (how many finished, failed or hung)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import threading
import time
from pathlib import Path


def _tree_rss(root_pid: int) -> int:
    """RSS in bytes summed over ``root_pid`` and all its descendants (read from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # fields[21]: rss in pages
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_measured(
    cmd: list[str], env: dict | None = None, cwd: Path | None = None, timeout: float | None = None
) -> dict:
    """Run ``cmd``; its wall time and the peak RSS of its process tree (sampled every 100 ms).
    Raises RuntimeError with the output's tail when it fails."""
    log = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.1):
            peak = max(peak, _tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    log.seek(0)
    output = log.read().decode(errors="replace")
    if code != 0:
        raise RuntimeError(
            f"{shlex.join(cmd)} {'timed out' if code is None else f'exited {code}'}:\n"
            f"{output[-4000:]}"
        )
    return {"seconds": seconds, "peak_rss": peak, "output": output}


def child_seconds(python: str, code: str, env: dict, timeout: float) -> float:
    """Run ``code`` in a fresh interpreter; it prints {"seconds": ...} as its last line."""
    proc = subprocess.run(
        [python, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def run_at_once(python: str, code: str, n: int, env: dict, timeout: float, scratch: Path) -> dict:
    """Start ``n`` interpreters at once; seconds until the last has a result, and how many
    failed (non-zero exit) or hung (still running at ``timeout``, then killed)."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    procs = []
    for i in range(n):
        out = open(scratch / f"{i}.log", "w+b")
        procs.append(
            (
                subprocess.Popen(
                    [python, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT
                ),
                out,
            )
        )
    deadline = start + timeout
    failed, hung, errors = 0, 0, []
    for proc, out in procs:
        try:
            code_ = proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            if code_ != 0:
                failed += 1
                out.seek(0)
                errors.append(out.read().decode(errors="replace").strip().splitlines()[-1:])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            hung += 1
        out.close()
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "n": n,
        "ok": n - failed - hung,
        "failed": failed,
        "hung": hung,
        "errors": sorted({e[0] for e in errors if e})[:3],
    }
