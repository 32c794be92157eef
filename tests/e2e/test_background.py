"""tests/e2e/background.py: a job that a test waits for runs at the tests' priority from then on
(where the session may raise a priority: root); the in_background tests run in the tests job
and the session reports their outcome there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


# A session of its own in tmp_path, with this folder's hooks (conftest.py), of tests that say
# where they ran: in the session, or in the tests job (background.IN_JOB set).
HOOKS = """\
import importlib.util, sys
sys.path[:0] = [{e2e!r}, {tests!r}]
spec = importlib.util.spec_from_file_location("e2e_conftest", {conftest!r})
e2e = sys.modules["e2e_conftest"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2e)
pytest_collection_modifyitems = e2e.pytest_collection_modifyitems
pytest_collection_finish = e2e.pytest_collection_finish
pytest_runtest_logreport = e2e.pytest_runtest_logreport
pytest_sessionfinish = e2e.pytest_sessionfinish

def pytest_configure(config):
    config.addinivalue_line("markers", "in_background: run in the tests job")
"""
TESTS = """\
import os, pytest

def test_in_the_session():
    assert not os.environ.get("PREBUILD_TESTS_IN_JOB")

@pytest.mark.in_background
def test_passes_in_the_job():
    assert os.environ.get("PREBUILD_TESTS_IN_JOB")

@pytest.mark.in_background
@pytest.mark.parametrize("n", [1, 2])
def test_fails_in_the_job(n):
    assert n == 1, "one is not two"

@pytest.mark.in_background
def test_skips_in_the_job():
    pytest.skip("nothing to do here")
"""


def test_in_background_tests_run_in_the_tests_job_and_report_their_outcome_there(tmp_path):
    here = Path(__file__).resolve().parent
    hooks = HOOKS.format(e2e=str(here), tests=str(here.parent), conftest=str(here / "conftest.py"))
    (tmp_path / "conftest.py").write_text(hooks)
    (tmp_path / "test_where.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k != background.IN_JOB}

    def pytest_run(*args: str) -> tuple[int, str]:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        return proc.returncode, proc.stdout + proc.stderr

    code, said = pytest_run("test_where.py")
    assert code == 1, said
    assert "1 failed, 3 passed, 1 skipped" in said, said
    assert "in the background (" in said and ": tests" in said, said
    # the failure as the job's pytest showed it, under the session's own node id
    assert "test_fails_in_the_job[2] (in the tests job)" in said, said
    assert "in the tests job (tests/e2e/background.py), its call failed:" in said, said
    assert "AssertionError: one is not two" in said, said
    assert "nothing to do here" in said, said
    # the marked tests alone run in the session itself (test_passes_in_the_job then fails)
    code, said = pytest_run("test_where.py", "-m", "in_background")
    assert code == 1 and "2 failed, 1 passed, 1 skipped" in said, said
    assert "in the tests job" not in said and "in the background" not in said, said
