"""The work of test_new_project.py, as a background job (background.py): ``prebuild new demo``,
its sm_80 and sm_90 wheels built by ``prebuild wheel`` and checked by ``prebuild inspect``, the
sm_90 one installed (the wheel only, offline) into a fresh venv with the CPU torch 2.13.0 and into
a copy of .venv-cuda (torch 2.14.1) and run there; then in a copy of the development venv the
project installed in place, its own tests run (the README's command) and ``prebuild selftest``.

Usage: python tests/e2e/new_project_job.py WORK (steps in WORK/steps.json, job_steps.py). A step
that fails ends the job (exit status 0: the steps say what failed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from build_helpers import ROOT
from job_steps import COMPILE_TIMEOUT, Steps
from venvs import clone_venv, prepare_cpu_venv, prepare_cuda_venv

sys.path.insert(0, str(ROOT / "tests"))
from pip_env import clean_pip_env

RUN = (
    "import importlib.util, torch, demo\n"
    "x, y = torch.arange(4.0), torch.ones(4)\n"
    "assert importlib.util.find_spec('prebuild') is None, 'prebuild is installed'\n"
    "print(demo.scale_add(x, y, 0.5).tolist(), torch.__version__)"
)
PYTHONS = ("cpu", "cuda")  # the venvs the sm_90 wheel is installed into and run in


def main(work: Path) -> None:
    steps = Steps(work)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    prebuild = [sys.executable, "-m", "prebuild"]
    if not steps.run("new", [*prebuild, "new", "demo"], environ, 300):
        return
    project, dist = work / "demo", work / "dist"
    archs = ["--arch", "sm_80,sm_90"]
    if not steps.run(
        "wheel", [*prebuild, "wheel", *archs, str(project), "--out", str(dist)], environ, 1800
    ):
        return
    for wheel in sorted(dist.glob("*.whl")):
        steps.run(f"inspect {wheel.name}", [*prebuild, "inspect", str(wheel)], environ, 300)
    (sm90,) = dist.glob("*sm90*.whl")

    pythons = {
        "cpu": clone_venv(prepare_cpu_venv().parent.parent, work / "venv-cpu"),
        "cuda": clone_venv(prepare_cuda_venv().parent.parent, work / "venv-cuda"),
    }
    offline = clean_pip_env(environ)  # the wheel only: none of the machine's pip settings
    for name in PYTHONS:
        python = str(pythons[name])
        install = [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", str(sm90)]
        if not steps.run(f"install {name}", install, offline, 600):
            return
        steps.run(f"run {name}", [python, "-c", RUN], offline, 300)

    # The README's test command, in a copy of the development venv (prebuild, pytest, torch 2.13).
    python = clone_venv(ROOT / ".venv", work / "venv-dev")
    env = {
        **environ,
        "PREBUILD_ARCHS": "",
        "PREBUILD_SIMT": "1",
        "PATH": f"{python.parent}:{environ['PATH']}",
    }
    editable = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-build-isolation",
        "--no-deps",
        "-e",
        ".",
    ]
    if not steps.run("editable", editable, env, COMPILE_TIMEOUT, cwd=project):
        return
    steps.run(
        "tests",
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        env,
        1200,
        cwd=project,
    )
    selftest = [str(python.parent / "prebuild"), "selftest", "demo", "--json"]
    steps.run("selftest", selftest, env, 600)


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]).resolve())
    except subprocess.TimeoutExpired as exc:
        sys.exit(f"a step ran past its time: {exc}")
