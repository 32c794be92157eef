"""The work of test_gsplat_build.py that takes minutes, as a background job (background.py):
prebuild installed into a copy of .venv-cuda with the commands of docs/classic-projects.md, then
``prebuild wheel --arch sm_90 gsplat==1.5.3``, nvcc reached through a wrapper script on PATH,
CUDA_HOME unset, as a new user would.

Usage: python tests/e2e/gsplat_wheel_job.py WORK. Everything is made under WORK; each step
(what, command, return code, output, seconds) goes to WORK/steps.json, which the test reads. A
step that fails ends the job (exit status 0: the steps say what failed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from build_helpers import copy_checkout, docs_block, nvcc_wrapper
from job_steps import COMPILE_TIMEOUT, Steps
from venvs import clone_venv, prepare_cuda_venv

GSPLAT = "gsplat==1.5.3"


def documented_classic_commands(checkout: Path) -> list[str]:
    """The set-up lines of docs/classic-projects.md's first block (before `prebuild wheel`), with the
    checkout's path for ./prebuild, comments dropped."""
    block = docs_block("classic-projects.md", "builds other people's classic extensions")
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    setup = lines[: next(i for i, line in enumerate(lines) if line.startswith("prebuild wheel"))]
    return [line.replace("./prebuild", str(checkout)) for line in setup if line]


def build_env(work: Path, bin_dir: Path) -> dict[str, str]:
    """The build's environment: the venv's scripts and an nvcc wrapper first on PATH, CUDA_HOME
    unset, a HOME of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "PYTHONPATH")}
    env.update(
        PATH=f"{bin_dir}:{nvcc_wrapper(work / 'wrapper')}:{env['PATH']}",
        VIRTUAL_ENV=str(bin_dir.parent),
        COLUMNS="200",
        HOME=str(work / "home"),
    )
    return env


def main(work: Path) -> None:
    steps = Steps(work)
    bin_dir = clone_venv(prepare_cuda_venv().parent.parent, work / "venv-build").parent
    env = build_env(work, bin_dir)
    checkout = copy_checkout(work / "prebuild")
    for command in documented_classic_commands(checkout):
        if not steps.run(
            "install prebuild", ["bash", "-euo", "pipefail", "-c", command], env, COMPILE_TIMEOUT
        ):
            return
    wheel = [str(bin_dir / "prebuild"), "wheel", "--arch", "sm_90", GSPLAT]
    steps.run("build the wheel", [*wheel, "--out", str(work / "dist")], env, COMPILE_TIMEOUT)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
