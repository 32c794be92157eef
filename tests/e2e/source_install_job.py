"""The work of test_source_install.py, as a background job (background.py): a fresh venv with
the CPU torch 2.13.0 only (a copy of .venv-cpu-torch), the committed checkout copied, then

- ``pip install --no-build-isolation .`` in that bare venv (the build must stop at once,
  naming its missing requirements);
- the bash block of docs/getting-started.md's "Building from source with pip", as written;
- a script run by the venv's python: where prebuild was imported from, its version, an SSIM
  and the archs its library's manifest records.

Usage: python tests/e2e/source_install_job.py WORK (steps in WORK/steps.json, job_steps.py).
A step that fails ends the job (exit status 0: the steps say what failed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from build_helpers import copy_checkout, docs_block
from job_steps import COMPILE_TIMEOUT, Steps
from venvs import clone_venv, prepare_cpu_venv

HEADING = "## Building from source with pip"
CHECK = """
import json, torch, prebuild
from prebuild.ops._library import LIBRARY
x = torch.rand(1, 3, 16, 16)
print(json.dumps({"file": prebuild.__file__, "version": prebuild.__version__,
                  "ssim": prebuild.fused_ssim(x, x).item(),
                  "sass": [a.sm for a in LIBRARY.manifest.sass_archs]}))
"""


def main(work: Path) -> None:
    steps = Steps(work)
    env_dir = work / "venv"
    python = clone_venv(prepare_cpu_venv().parent.parent, env_dir)
    source = copy_checkout(work / "checkout")
    env = {
        "PATH": f"{python.parent}:{os.environ['PATH']}",
        "HOME": str(work / "home"),
        "VIRTUAL_ENV": str(env_dir),
        # The docs' first line installs from the machine's indexes: its pip settings given in
        # variables (a CI's mirror) go with it (a config file under the real HOME does not).
        **{k: v for k, v in os.environ.items() if k.startswith(("PIP_", "UV_"))},
    }
    steps.run("bare", ["pip", "install", "--no-build-isolation", "."], env, 600, cwd=source)
    block = docs_block("getting-started.md", HEADING)
    if not steps.run(
        "docs", ["bash", "-euo", "pipefail", "-c", block], env, COMPILE_TIMEOUT, cwd=source
    ):
        return
    steps.run("check", [str(python), "-c", CHECK], env, 300, cwd=work)


if __name__ == "__main__":
    try:
        main(Path(sys.argv[1]).resolve())
    except subprocess.TimeoutExpired as exc:
        sys.exit(f"a step ran past its time: {exc}")
