"""The build of test_farm_build.py's ``farm`` fixture, as a background job (background.py): a
recipe set of two projects (the gencode_ext classic fixture and a project ``prebuild new demo``
scaffolds), built by ``prebuild farm build RECIPES --torch 2.14 --cuda 13.0 --arch
sm_80,sm_90`` in .venv-cuda, nvcc through a wrapper script on PATH, CUDA_HOME unset.

Usage: python tests/e2e/farm_job.py WORK (the step in WORK/steps.json, job_steps.py; the
recipes in WORK/recipes, the site in WORK/site, the farm's work in WORK/farm-work)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from build_helpers import PREBUILD, prebuild_env
from job_steps import Steps
from venvs import prepare_cuda_venv

FIXTURES = Path(__file__).parent / "fixtures" / "classic"
FARM = ["--torch", "2.14", "--cuda", "13.0", "--arch", "sm_80,sm_90"]


def farm_command(python: Path, *args: object) -> list[str]:
    return [str(python), "-m", "prebuild", "farm", *map(str, args)]


def recipes(where: Path, demo: Path) -> Path:
    where.mkdir()
    (where / "classic.toml").write_text(
        f"""
[[project]]
name = "gencode_ext"
source = "{FIXTURES / "gencode_ext"}"
"""
    )
    (where / "native.toml").write_text(f'[[project]]\nname = "demo"\nsource = "{demo}"\n')
    return where


def main(work: Path) -> None:
    steps = Steps(work)
    python = prepare_cuda_venv()
    scaffold = [str(PREBUILD), "new", "demo"]
    if not steps.run("new", scaffold, {**os.environ, "COLUMNS": "200"}, 300, cwd=work):
        return
    recipe_set = recipes(work / "recipes", work / "demo")
    command = farm_command(python, "build", recipe_set, *FARM)
    command += ["--out", str(work / "site"), "--work", str(work / "farm-work")]
    steps.run("build", command, prebuild_env(work, python), 3000)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
