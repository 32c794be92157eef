"""Long subprocesses that run in the CPU time the session's other tests leave idle.

On 2 cores the suite keeps about 1.4 of them busy: pip's downloads, venvs being copied and
single-threaded tests leave the rest idle. A test whose work is one long subprocess (the
sanitizers' run, gsplat's build) is marked ``@pytest.mark.background("JOB")``. Once the tests
are collected (this folder's conftest), its job starts at the lowest CPU priority (nice 19): it
takes only a core the other tests leave free, and barely slows them. The marked test is moved to
the end of the session, where it waits for its job and asserts on the job's output as it would
on a command it had run itself. A job a test waits for goes to the tests' priority. A test run
alone starts its job at once, at normal priority.

A test that is itself long and single-process (a classic fixture built three times over) is
marked ``@pytest.mark.in_background``: all such tests run in one child pytest, the ``tests`` job,
started with the others, and each stands in the session as an item that waits for the job and
reports the test's outcome there (tests/e2e/conftest.py). Their minutes of one core go where
the session leaves a core idle, not into its single-process tail (2026-12-07: the background
jobs done, one core idle for ~4 minutes while the classic fixtures' tests ran one by one).

The downloads of other torch releases (torch_venvs.py) start here too, by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
NICE = 19  # the lowest priority: a background job runs only on a core nothing else wants
# The job on the suite's critical path runs ahead of the other background jobs: gsplat's build
# (a CUDA venv, prebuild installed, 15 minutes of nvcc) is what the suite's last test waits for
# (309 s in a 31-minute run, 2026-11-27). Nice 10 outweighs 19 about 7 to 1 in Linux's
# scheduler weights and still yields to the tests (about 1 to 9 against nice 0).
# The fixtures' jobs (FIXTURE_JOBS) too: their tests run before the marked ones.
JOB_NICE = {"gsplat-wheel": 10, "shared-wheels": 10, "classic-plain": 10, "farm-build": 10}


def _script_job(script: str) -> Callable[[Path], list[str]]:
    """A job that is one of this folder's ``*_job.py`` scripts, given the job's folder."""
    return lambda work: [sys.executable, str(HERE / script), str(work)]


# A marked test's job: its name -> its command, given the job's own folder (removed when the
# session ends). Run from the checkout, its output kept in that folder.
JOBS: dict[str, Callable[[Path], list[str]]] = {
    # scripts/sanitize.sh runs pytest in a venv of its own: its temporary folders in the job's.
    "sanitize": lambda work: [
        "bash",
        str(ROOT / "scripts" / "sanitize.sh"),
        "-q",
        f"--basetemp={work / 'pytest'}",
    ],
    "gsplat-wheel": _script_job("gsplat_wheel_job.py"),
    "deepspeed": _script_job("deepspeed_job.py"),
    # gsplat's own tests on prebuild's CPU kernels, the cases without batch dimensions
    "gsplat-suite": lambda work: [
        sys.executable,
        str(ROOT / "scripts" / "gsplat_suite.py"),
        "-k",
        "batch_dims0",
        "--require",
        "0.9",
        "--json",
        str(work / "report.json"),
    ],
    "source-install": _script_job("source_install_job.py"),
    "cuda-torch": _script_job("cuda_torch_job.py"),
    "new-project": _script_job("new_project_job.py"),
    # scripts/bench.py at its quick settings (test_bench_run.py). A child it times counts as hung
    # after --timeout: 600 s, not the quick 60, as a job's children may wait for a core.
    "bench-quick": lambda work: [
        sys.executable,
        str(ROOT / "scripts" / "bench.py"),
        "--quick",
        "--repeats",
        "1",
        "--processes",
        "1,2",
        "--timeout",
        "600",
        "--out",
        str(work / "docs"),
        "--work",
        str(work / "w"),
    ],
}


# Fixtures whose work is one long subprocess: its job starts with the session's as soon as a
# collected test uses the fixture, and the fixture waits for it (conftest.py runs the modules of
# such tests after the others, so that the job is done by then). In a 25-minute run the tests
# that built these themselves kept one core busy and left the other idle for the last 13
# minutes (the marked tests' jobs done), 2026-12-02.
FIXTURE_JOBS: dict[str, str] = {
    "shared_objects": "shared-wheels",  # built_wheel's wheels (conftest.py)
    "plain_job": "classic-plain",  # test_classic_build.py
    "farm": "farm-build",  # test_farm_build.py
}
JOBS.update(
    {
        "shared-wheels": _script_job("shared_wheels_job.py"),
        "classic-plain": _script_job("classic_plain_job.py"),
        "farm-build": _script_job("farm_job.py"),
    }
)


# The tests job: the in_background tests, set by conftest.py when the session's tests are
# collected (set_tests); the child pytest records each test's outcome in REPORT
# (record_outcome), named by IN_JOB in its environment, where those tests run as any other.
TESTS_JOB = "tests"
IN_JOB = "PREBUILD_TESTS_IN_JOB"
REPORT = "outcomes.json"
_tests: tuple[Path, list[str]] = (ROOT, [])


def set_tests(rootdir: Path, nodeids: list[str]) -> None:
    """The tests job runs the tests ``nodeids`` of the session whose rootdir is ``rootdir``
    (its node ids are the session's)."""
    global _tests
    _tests = (rootdir, list(nodeids))


def _tests_job(work: Path) -> list[str]:
    rootdir, nodeids = _tests
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",  # the session's own pytest writes .pytest_cache
        f"--rootdir={rootdir}",
        f"--basetemp={work / 'pytest'}",
        *(f"{rootdir}/{nodeid}" for nodeid in nodeids),
    ]


JOBS[TESTS_JOB] = _tests_job


# The shared venvs each job copies or builds in (venvs.py: "cpu" is .venv-cpu-torch, "cuda"
# .venv-cuda, each made under a file lock): the job starts once the session has made them at the
# tests' priority. A job at nice 19 holding that lock for the 5.5 GB install stalled the tests
# waiting on it (the tests used 0.3 of the 2 cores for 2 minutes, 2026-11-28).
NEEDS_VENVS: dict[str, frozenset[str]] = {
    "gsplat-wheel": frozenset({"cuda"}),
    "deepspeed": frozenset({"cuda"}),
    "cuda-torch": frozenset({"cuda"}),
    "new-project": frozenset({"cpu", "cuda"}),
    "source-install": frozenset({"cpu"}),
    "classic-plain": frozenset({"cuda"}),
    "farm-build": frozenset({"cuda"}),
}

# Every job's environment starts from this (the job's own settings win): its torch computes on
# one thread. Two OpenMP threads of a job that gets a core only now and then spin at every
# barrier for the one that is descheduled: gsplat's suite took 406 s of CPU time in a run
# beside the tests against 82 s alone (62 s on one thread), and the sanitizers' 469 s against
# 359 s (2026-11-29). The jobs check results, not speed; the tests that mean several threads
# set them (torch.set_num_threads).
JOB_ENV = {"OMP_NUM_THREADS": "1"}


@dataclass
class Job:
    proc: subprocess.Popen
    work: Path
    stdout: Path
    stderr: Path


_jobs: dict[str, Job] = {}
_folder: Path | None = None


def _work_folder(name: str) -> Path:
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="prebuild-background-"))
    work = _folder / name
    work.mkdir(parents=True, exist_ok=True)
    return work


def record_outcome(report) -> None:
    """In the tests job: ``report`` (a phase of a test, pytest's TestReport) folded into its
    test's outcome in the job's REPORT: failed if any phase failed, else skipped if skipped,
    else passed, with the text pytest would show."""
    path = os.environ.get(IN_JOB)
    if not path:
        return
    outcomes = json.loads(Path(path).read_text()) if Path(path).exists() else {}
    old = outcomes.get(report.nodeid, {"outcome": "passed", "text": ""})
    if report.failed:
        new = {"outcome": "failed", "text": f"its {report.when} failed:\n{report.longreprtext}"}
    elif report.skipped and old["outcome"] == "passed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longreprtext
        new = {"outcome": "skipped", "text": reason}
    else:
        new = old
    outcomes[report.nodeid] = new
    Path(path).write_text(json.dumps(outcomes, indent=1))


def outcome_in_job(nodeid: str, timeout: float) -> tuple[str, str]:
    """The outcome of the in_background test ``nodeid`` in the tests job ("passed", "failed",
    "skipped") and its text, once the job is done. A test the job did not report (it failed
    to collect, or stopped) failed, with the end of the job's output."""
    job, work = result(TESTS_JOB, timeout)
    outcomes = json.loads((work / REPORT).read_text()) if (work / REPORT).exists() else {}
    if nodeid in outcomes:
        return outcomes[nodeid]["outcome"], outcomes[nodeid]["text"]
    ended = f"the tests job ended with {job.returncode}, no outcome of this test"
    return "failed", f"{ended}:\n{job.stdout[-6000:]}\n{job.stderr[-3000:]}"


def start(
    name: str,
    command: list[str] | None = None,
    *,
    env: dict[str, str] | None = None,
    nice: int | None = None,
) -> Job:
    """Start job ``name`` (``command``, or JOBS[name]'s) unless it is running or ran, at
    ``nice`` (default: the job's JOB_NICE, else NICE)."""
    if name in _jobs:
        return _jobs[name]
    if nice is None:
        nice = JOB_NICE.get(name, NICE)
    work = _work_folder(name)
    argv = command if command is not None else JOBS[name](work)
    env = {**JOB_ENV, **(os.environ if env is None else env)}
    if name == TESTS_JOB:
        env[IN_JOB] = str(work / REPORT)
    stdout, stderr = work / "stdout.log", work / "stderr.log"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            preexec_fn=lambda: _lower_priority(nice),
        )
    _jobs[name] = Job(proc, work, stdout, stderr)
    return _jobs[name]


def _lower_priority(nice: int) -> None:
    """In the child: a process group of its own (stop() ends the job's children with it), in
    the session's own session. A new session would be a new scheduler autogroup, and Linux
    shares the CPU between autogroups whatever their processes' nice values: the job would
    take a full half of the machine from the tests instead of what they leave idle."""
    os.setpgid(0, 0)
    if nice:
        os.nice(nice)


def started(name: str) -> bool:
    return name in _jobs


def result(name: str, timeout: float) -> tuple[subprocess.CompletedProcess, Path]:
    """Job ``name``'s completed process (its output as text) and its folder: waits for it, or
    runs it now (at normal priority) when nothing started it. A job that outlives ``timeout``
    is stopped and raises subprocess.TimeoutExpired."""
    job = _jobs.get(name) or start(name, nice=0)
    _raise_priority(job)
    try:
        returncode = job.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(job.proc)
        raise
    stdout = job.stdout.read_text(errors="replace")
    stderr = job.stderr.read_text(errors="replace")
    return subprocess.CompletedProcess(job.proc.args, returncode, stdout, stderr), job.work


def _raise_priority(job: Job) -> None:
    """A test now waits for the job: it is the session's critical path, and at nice 19 it would
    get almost no CPU beside a job at nice 10 (seen: a test waited 10 minutes for torch 2.10.0's
    download while gsplat compiled). Its whole process group goes to the tests' priority. Only
    root may raise a priority; elsewhere the job keeps its own."""
    try:
        os.setpriority(os.PRIO_PGRP, job.proc.pid, os.getpriority(os.PRIO_PROCESS, 0))
    except (PermissionError, ProcessLookupError):
        pass


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop() -> None:
    """The session ends: a job nobody waited for is stopped, and the jobs' folders removed."""
    global _folder
    for job in _jobs.values():
        _kill(job.proc)
    _jobs.clear()
    if _folder is not None:
        shutil.rmtree(_folder, ignore_errors=True)
        _folder = None
