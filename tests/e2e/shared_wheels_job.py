"""The wheels of ``built_wheel`` (conftest.py), as a background job (background.py): prebuild's
own wheel for each configuration the slow tests ask for, ``prebuild wheel --arch ARCHS [FLAGS]``
into one objects directory for all (the CPU code compiled once), which starts with the host
objects scripts/bootstrap.sh's editable install compiled in the checkout (build/prebuild/host:
the same compiler commands, for this checkout and .venv's torch), so that the first wheel
compiles only its CUDA code (about 34 s of CPU time saved, 2026-12-01).

Usage: python tests/e2e/shared_wheels_job.py WORK (steps in WORK/steps.json, job_steps.py; the
objects in WORK/objects, the wheel of SHARED_WHEELS[i] in WORK/dist-i)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from build_helpers import PREBUILD, ROOT
from job_steps import Steps

from prebuild.tool.builder.compile import default_build_dir, host_build_dir

# What the slow tests ask built_wheel for; any other configuration is built when asked.
SHARED_WHEELS: tuple[tuple[str, ...], ...] = (("sm_80",), ("8.0,sm_90", "--fat", "--ptx"))


def objects(work: Path) -> Path:
    return work / "objects"


def dist(work: Path, key: tuple[str, ...]) -> Path:
    return work / f"dist-{SHARED_WHEELS.index(key)}"


def step_name(key: tuple[str, ...]) -> str:
    return " ".join(key)


def main(work: Path) -> None:
    steps = Steps(work)
    bootstrap = host_build_dir(default_build_dir(ROOT))
    if (bootstrap / ".ninja_log").is_file():
        shutil.copytree(bootstrap, host_build_dir(objects(work)), symlinks=True)
    env = {**os.environ, "COLUMNS": "200"}
    for key in SHARED_WHEELS:
        archs, *flags = key
        command = [str(PREBUILD), "wheel", "--arch", archs, *flags]
        command += ["--out", str(dist(work, key)), "--build-dir", str(objects(work))]
        steps.run(step_name(key), command, env, 1800, cwd=ROOT)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
