"""The build of test_classic_build.py's ``plain_wheels``, as a background job (background.py):
the plain_ext fixture's sm_80 and sm_90 wheels, ``prebuild wheel --arch sm_80,sm_90 plain_ext
--build-dir WORK/build`` (``prebuild_wheel``: .venv-cuda, nvcc through a wrapper script on PATH,
CUDA_HOME unset), with the fixture's files listed before and after.

Usage: python tests/e2e/classic_plain_job.py WORK (the step in WORK/steps.json, job_steps.py;
the wheels in WORK/dist, the build directory WORK/build, the listings in WORK/trees.json)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from build_helpers import prebuild_wheel, tree_snapshot
from job_steps import Steps
from venvs import prepare_cuda_venv

PLAIN = Path(__file__).parent / "fixtures" / "classic" / "plain_ext"


def main(work: Path) -> None:
    steps = Steps(work)
    before = tree_snapshot(PLAIN)
    started = time.monotonic()
    command = ["--arch", "sm_80,sm_90", str(PLAIN), "--out", str(work / "dist")]
    proc = prebuild_wheel(prepare_cuda_venv(), *command, "--build-dir", str(work / "build"))
    steps.record("build", proc, time.monotonic() - started)
    trees = {"before": before, "after": tree_snapshot(PLAIN)}
    (work / "trees.json").write_text(json.dumps(trees))


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
