"""tests/cpu_cost.py: the ``--cpu-cost`` report counts a phase's own CPU time and its reaped
children's, sums them per file, and gives the machine's idle CPU time during each test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace

from cpu_cost import CpuCost


def run_phase(cost: CpuCost, nodeid: str, phase: str, work) -> None:
    measure = cost._measure(SimpleNamespace(nodeid=nodeid), phase)
    next(measure)
    work()
    for _ in measure:  # the hook wrapper's end: records the phase
        pass


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_phases_count_own_and_child_cpu_and_the_report_sums_files():
    cost = CpuCost()
    run_phase(cost, "tests/a.py::test_own", "call", lambda: burn(0.3))
    child = [
        sys.executable,
        "-c",
        "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
    ]
    run_phase(cost, "tests/b.py::test_child", "call", lambda: subprocess.run(child, check=True))
    run_phase(cost, "tests/b.py::test_child", "teardown", lambda: time.sleep(0.3))  # no CPU
    seconds = {(nodeid, phase): s for s, phase, nodeid in cost.phases}
    assert seconds[("tests/a.py::test_own", "call")] >= 0.29
    assert seconds[("tests/b.py::test_child", "call")] >= 0.29  # the child's, once reaped
    assert seconds[("tests/b.py::test_child", "teardown")] < 0.1

    lines: list[str] = []
    reporter = SimpleNamespace(write_line=lines.append, section=lambda title: lines.append(title))
    cost.pytest_terminal_summary(reporter)
    assert lines[0].startswith("CPU time: ") and lines[0].endswith("the 15 costliest")
    idle_at = next(i for i, line in enumerate(lines) if line.startswith("idle CPU"))
    files = lines[lines.index("by file:") + 1 : idle_at]
    totals = {line.split()[1]: float(line.split()[0].rstrip("s")) for line in files}
    assert set(totals) == {"tests/a.py", "tests/b.py"}
    assert list(totals.values()) == sorted(totals.values(), reverse=True)
    assert totals["tests/b.py"] >= 0.29  # the call and the teardown together
    # The idle CPU during each test: in seconds (not clock ticks), at most every core's for
    # the test's wall time, whatever else the machine runs.
    assert set(cost.idle) == {"tests/a.py::test_own", "tests/b.py::test_child"}
    assert cost.idle["tests/b.py::test_child"][1] >= 0.29  # its call's and teardown's wall time
    for nodeid, (seconds, wall) in cost.idle.items():
        assert 0 <= seconds <= wall * os.cpu_count() + 0.05, (nodeid, seconds, wall)
    idle_lines = lines[idle_at + 1 :]
    assert len(idle_lines) == 2 and all(" idle in " in line for line in idle_lines), idle_lines
