"""``pytest --cpu-cost``: the CPU time each test costs, printed before the slowest durations.

The whole suite keeps 2 cores busy (vmstat during a `.ci/run`: 3.6 % idle, 2026-11-27), so what a
test adds to the total is the CPU it uses, not its wall time: a test that waits for a background
job shows minutes of wall time while the other tests run, and a background job's compile costs
the whole session although no test's wall time shows it. Counted per phase (setup, call,
teardown): the pytest process's own time and that of the children it reaped meanwhile
(subprocesses, and a background job when the test collecting it waits for it). Registered by
tests/conftest.py when the option is given on the command line (not in PYTEST_ADDOPTS: the
suite's own child pytests would not know it).

It also gives, per test, the CPU time the machine left idle while the test ran (/proc/stat, every
core's): the tests that leave a core idle, the session's single-process tail, are where a run
loses wall time.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

SHOWN = 15


def cpu_seconds() -> float:
    """User and system time of this process and of the children it has reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_idle_seconds() -> float:
    """The machine's idle CPU time since boot (idle and iowait, every core's together), from
    /proc/stat's first line; 0 where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return 0.0
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


class CpuCost:
    def __init__(self) -> None:
        self.phases: list[tuple[float, str, str]] = []  # (seconds, phase, nodeid)
        # Per test, the machine's idle core-seconds and the wall seconds of its phases: the
        # tests that leave cores idle are where a run loses time (the session's tail).
        self.idle: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.start = cpu_seconds()

    def _measure(self, item: pytest.Item, phase: str) -> Iterator[None]:
        before, idle, wall = cpu_seconds(), machine_idle_seconds(), time.monotonic()
        yield
        self.phases.append((cpu_seconds() - before, phase, item.nodeid))
        self.idle[item.nodeid][0] += machine_idle_seconds() - idle
        self.idle[item.nodeid][1] += time.monotonic() - wall

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item):
        yield from self._measure(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        yield from self._measure(item, "call")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item):
        yield from self._measure(item, "teardown")

    def pytest_terminal_summary(self, terminalreporter) -> None:
        total = cpu_seconds() - self.start
        by_file: dict[str, float] = defaultdict(float)
        for seconds, _, nodeid in self.phases:
            by_file[nodeid.split("::")[0]] += seconds
        write = terminalreporter.write_line
        terminalreporter.section(f"CPU time: {total:.0f} s in all, the {SHOWN} costliest")
        for seconds, phase, nodeid in sorted(self.phases, reverse=True)[:SHOWN]:
            write(f"{seconds:8.1f}s {phase:<8} {nodeid}")
        write("by file:")
        for path, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:SHOWN]:
            write(f"{seconds:8.1f}s {path}")
        idle = sum(seconds for seconds, _ in self.idle.values())
        write(f"idle CPU (every core's) during the tests: {idle:.0f} s; the tests leaving most:")
        for nodeid, (seconds, wall) in sorted(self.idle.items(), key=lambda kv: -kv[1][0])[:SHOWN]:
            write(f"{seconds:8.1f}s idle in {wall:.0f}s {nodeid}")
