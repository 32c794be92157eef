"""Real wheels for the slow tests, each built once per session.

Every test that only needs *a* real wheel takes it from ``built_wheel``: one objects
directory (``shared_objects``) for all of them, so the CPU code is compiled once, each CUDA
arch set once, and each wheel packaged once. Tests that must compile (interrupted builds,
other toolchains, a planted error) use their own directories; those whose subject is the tool
and not prebuild's kernels (the compile cache, an interrupted build, PyPI's nvcc) build copies
of the smallest native project instead (``small_native_project``: one op, seconds to compile).

The venvs they build and run in (venvs.py makes them):

``cuda_torch_python``: the python of ``.venv-cuda`` (the CUDA build of torch 2.14.1).

``fresh_venv``: a new venv holding only the CPU torch 2.13.0 (what a user has after
``python -m venv`` and ``pip install torch==2.13.0``): a hard-linked copy (~0.3 s) of
``.venv-cpu-torch`` (``cpu_torch_python``) whose scripts (``bin/pip``, ...) name its own
interpreter.

Tests whose work is one long subprocess run it in the background (background.py): it starts
when the tests are collected and these tests run last.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import background
import pytest
import shared_wheels_job
from build_helpers import prebuild_wheel, run_cli
from job_steps import read_steps
from venvs import MADE_ENV, clone_venv, prepare_cpu_venv, prepare_cuda_venv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cuda_torch_python() -> Path:
    return prepare_cuda_venv()


@pytest.fixture(scope="session")
def cpu_torch_python() -> Path:
    return prepare_cpu_venv()


@pytest.fixture
def fresh_venv(cpu_torch_python, tmp_path) -> Callable[[str], Path]:
    """``fresh_venv(name="venv")`` -> the python of a new venv under tmp_path with torch only."""
    return lambda name="venv": clone_venv(cpu_torch_python.parent.parent, tmp_path / name)


@pytest.fixture
def fresh_cuda_venv(cuda_torch_python, tmp_path) -> Callable[[str], Path]:
    """``fresh_cuda_venv(name)`` -> the python of a copy of .venv-cuda (torch 2.14.1+cu130)."""
    return lambda name="venv-cuda": clone_venv(cuda_torch_python.parent.parent, tmp_path / name)


@pytest.fixture
def dev_venv_copy(tmp_path) -> Callable[[str], Path]:
    """``dev_venv_copy(name)`` -> the python of a hard-linked copy of the development venv
    (.venv: prebuild editable, pytest, torch 2.13), to install into without touching .venv."""
    return lambda name="venv-dev": clone_venv(ROOT / ".venv", tmp_path / name)


@pytest.fixture
def venv_copy(tmp_path) -> Callable[[Path, str], Path]:
    """``venv_copy(template, name)`` -> the python of a hard-linked copy of the venv ``template``
    (a venv made once and kept, such as ``.venv-torch-2.10.0``), to install into freely."""
    return lambda template, name="venv": clone_venv(template, tmp_path / name)


@pytest.fixture(scope="session")
def stable_ext_wheel(cuda_torch_python, tmp_path_factory) -> tuple[Path, str]:
    """The classic fixture stable_ext (a setup.py project on the stable ABI) built for sm_90
    against torch 2.14.1: its wheel and what ``prebuild wheel`` printed."""
    out = tmp_path_factory.mktemp("stable-ext")
    project = Path(__file__).resolve().parent / "fixtures" / "classic" / "stable_ext"
    proc = prebuild_wheel(cuda_torch_python, "--arch", "sm_90", str(project), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
    (wheel,) = out.glob("*.whl")
    return wheel, proc.stdout


@dataclass(frozen=True)
class FixtureBuild:
    """One ``prebuild wheel`` run on a classic fixture: its wheel, the run, its --build-dir
    and its wall time."""

    wheel: Path
    proc: subprocess.CompletedProcess
    work: Path
    took: float


@pytest.fixture(scope="session")
def host_code_wheels(cuda_torch_python, tmp_path_factory) -> dict[str, FixtureBuild]:
    """The classic fixtures of host code only, cuda_host_ext (CUDA host code) and cpu_ext (CPU
    code), each built with ``--arch sm_80,sm_90`` against torch 2.14.1 (neither calls anything
    of torch's: one wheel each, for every torch)."""
    fixtures = Path(__file__).resolve().parent / "fixtures" / "classic"
    built = {}
    for project in ("cuda_host_ext", "cpu_ext"):
        root = tmp_path_factory.mktemp(project)
        out, work = root / "dist", root / "work"
        started = time.monotonic()
        proc = prebuild_wheel(
            cuda_torch_python,
            *("--arch", "sm_80,sm_90", str(fixtures / project)),
            *("--out", str(out), "--build-dir", str(work)),
        )
        took = time.monotonic() - started
        assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
        (wheel,) = out.glob("*.whl")
        built[project] = FixtureBuild(wheel, proc, work, took)
    return built


@pytest.fixture(scope="session")
def shared_wheels() -> tuple[Path, dict[str, dict]]:
    """The shared-wheels job's folder and steps (shared_wheels_job.py), once it is done."""
    job, work = background.result("shared-wheels", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    return work, {step["what"]: step for step in read_steps(work)}


@pytest.fixture(scope="session")
def shared_objects(shared_wheels) -> Path:
    """The build directory of every ``built_wheel``, the shared-wheels job's."""
    return shared_wheels_job.objects(shared_wheels[0])


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory, shared_wheels, shared_objects) -> Callable[..., Path]:
    """``built_wheel("sm_80")``, ``built_wheel("sm_80,sm_90", "--fat", "--ptx")``: the path of
    the one wheel ``prebuild wheel --arch ARCHS [FLAGS]`` makes: the shared-wheels job's, or
    built on first request for another configuration."""
    work, steps = shared_wheels
    cache: dict[tuple[str, ...], Path] = {}

    def get(archs: str, *flags: str) -> Path:
        key = (archs, *flags)
        if key in cache:
            return cache[key]
        if key in shared_wheels_job.SHARED_WHEELS:
            step = steps[shared_wheels_job.step_name(key)]
            stdout, stderr = step["stdout"], step["stderr"]
            assert step["returncode"] == 0, stdout + stderr
            out = shared_wheels_job.dist(work, key)
        else:
            out = tmp_path_factory.mktemp("dist")
            proc = run_cli(
                "wheel",
                "--arch",
                archs,
                *flags,
                "--out",
                str(out),
                "--build-dir",
                str(shared_objects),
            )
            stdout, stderr = proc.stdout, proc.stderr
            assert proc.returncode == 0, stdout + stderr
        (wheel,) = out.glob("*.whl")
        assert "1 wheel in" in stdout, stdout  # the summary
        cache[key] = wheel
        return wheel

    return get


@pytest.fixture(scope="session")
def small_native_project(tmp_path_factory) -> Callable[[Path], Path]:
    """``small_native_project(dest)``: a fresh copy, at ``dest``, of the project ``prebuild new
    demo`` scaffolds (one op, scale_add, with its own CPU and CUDA library), scaffolded once per
    session. Each copy is a separate checkout of the same sources (as two clones are)."""
    source = tmp_path_factory.mktemp("scaffolded") / "demo"
    proc = run_cli("new", source.name, cwd=source.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def copy(dest: Path) -> Path:
        shutil.copytree(source, dest)
        return dest

    return copy


def background_job(item) -> str | None:
    marker = item.get_closest_marker("background")
    return marker.args[0] if marker else None


def fixture_jobs(item) -> set[str]:
    """The jobs of the fixtures ``item`` uses (background.FIXTURE_JOBS)."""
    names = getattr(item, "fixturenames", ())
    return {job for fixture, job in background.FIXTURE_JOBS.items() if fixture in names}


class InJobTest(pytest.Item):
    """An ``in_background`` test as the session sees it: it waits for the tests job
    (background.py) and has the outcome the test had there. It sets up no fixture."""

    def __init__(self, *, test: pytest.Function, **kwargs) -> None:
        super().__init__(**kwargs)
        self.own_markers.extend(test.own_markers)
        self.test_fixtures = tuple(test.fixturenames)  # the venvs the job needs made

    def runtest(self) -> None:
        outcome, text = background.outcome_in_job(self.nodeid, timeout=3600)
        if outcome == "skipped":
            pytest.skip(text)
        if outcome == "failed":
            pytest.fail(f"in the tests job (tests/e2e/background.py), {text}", pytrace=False)

    def reportinfo(self):
        return self.path, None, f"{self.name} (in the tests job)"


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected
def pytest_collection_modifyitems(config, items) -> None:
    """The tests that wait for a background job run last, and before them the modules whose
    tests use a fixture's job, whole (a module's fixtures set up once): the session's other
    tests run while the jobs do (background.py). The in_background tests go to the tests job,
    unless they are all the session runs (then they run here, as any other)."""
    if not os.environ.get(background.IN_JOB):
        marked = [item for item in items if item.get_closest_marker("in_background")]
        if marked and len(marked) < len(items):
            items[:] = [
                InJobTest.from_parent(item.parent, name=item.name, test=item)
                if item.get_closest_marker("in_background")
                else item
                for item in items
            ]
    waiting = {item.path for item in items if fixture_jobs(item)}

    def place(item) -> int:
        if background_job(item) or isinstance(item, InJobTest):
            return 2
        return 1 if item.path in waiting else 0

    items.sort(key=place)  # stable: order kept otherwise


def pytest_runtest_logreport(report) -> None:
    background.record_outcome(report)  # in the tests job only


# The fixtures that take each shared venv (venvs.py), made before the tests that use them run.
VENV_FIXTURES = {"cpu": "cpu_torch_python", "cuda": "cuda_torch_python"}


def pytest_collection_finish(session) -> None:
    """The collected tests' background jobs start, and the torch releases test_torch_versions.py
    will check download in the background from now on (torch_venvs.py: only where the disk has
    room for all of them at once)."""
    import torch_venvs

    if session.config.option.collectonly:
        return
    versions = sorted(
        {
            item.callspec.params["version"]
            for item in session.items
            if item.path.name == "test_torch_versions.py" and hasattr(item, "callspec")
        }
    )
    # first: the network's work, beside the venvs made below
    started = [f"torch {v}" for v in (torch_venvs.prefetch(versions) if versions else [])]
    in_job = [item for item in session.items if isinstance(item, InJobTest)]
    background.set_tests(session.config.rootpath, [item.nodeid for item in in_job])
    jobs = sorted(
        {job for item in session.items if (job := background_job(item))}
        | {job for item in session.items for job in fixture_jobs(item)}
        | ({background.TESTS_JOB} if in_job else set())
    )
    fixtures = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    # Each shared venv a job or a test needs is made here, at the tests' priority, and each job
    # starts as soon as the venvs it needs are (background.NEEDS_VENVS; the tests job's, those
    # its tests' fixtures name).
    needs = {job: background.NEEDS_VENVS.get(job, frozenset()) for job in jobs}
    if in_job:
        wanted = {name for item in in_job for name in item.test_fixtures}
        needs[background.TESTS_JOB] = frozenset(
            venv for venv, fixture in VENV_FIXTURES.items() if fixture in wanted
        )
    made: set[str] = set()

    def start_ready() -> None:
        for job in jobs:
            if needs[job] <= made:
                background.start(job)  # a job started already is left as it is

    start_ready()
    for venv, prepare in (("cpu", prepare_cpu_venv), ("cuda", prepare_cuda_venv)):
        if VENV_FIXTURES[venv] in fixtures or any(venv in need for need in needs.values()):
            python = prepare()
            made.add(venv)
            # for the jobs started from now on (venvs.MADE_ENV)
            done = os.environ.get(MADE_ENV, "").split(os.pathsep)
            os.environ[MADE_ENV] = os.pathsep.join(filter(None, [*done, str(python.parent.parent)]))
            start_ready()
    if jobs or started:
        ahead = "".join(f", {job} {nice}" for job, nice in background.JOB_NICE.items())
        print(f"\nin the background (nice {background.NICE}{ahead}): {', '.join(jobs + started)}")


def pytest_sessionfinish(session) -> None:
    background.stop()
