"""tests/e2e/background.py: a job that a test waits for runs at the tests' priority from then on
(where the session may raise a priority: root)."""

from __future__ import annotations

import os
import sys

import background
import pytest

pytestmark = pytest.mark.slow

# The job reports its nice value after the test has started waiting for it.
REPORT_NICE = "import os, time; time.sleep(1.5); print(os.nice(0))"


def test_a_job_waited_for_runs_at_the_tests_priority():
    name = "report-nice"
    background.start(name, [sys.executable, "-c", REPORT_NICE], nice=19)
    try:
        proc, _ = background.result(name, timeout=60)
    finally:
        background._jobs.pop(name, None)
    assert proc.returncode == 0, proc.stderr
    mine = os.nice(0)
    assert int(proc.stdout) == (mine if os.geteuid() == 0 else 19)
