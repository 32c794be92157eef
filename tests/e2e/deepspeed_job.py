"""The work of test_deepspeed_build.py, as a background job (background.py): DeepSpeed 0.19.8
from the registry, built by ``prebuild wheel --arch sm_90 deepspeed==0.19.8`` (prebuild from
src/) in a copy of .venv-cuda, nvcc through a wrapper script on PATH, CUDA_HOME unset, no GPU:

- with ``DS_ACCELERATOR=cuda`` alone: DeepSpeed builds no op at install unless asked (its
  setup.py runs, and the wheel holding no library is refused, naming its switches);
- with ``DS_BUILD_FUSED_ADAM=1`` alone: with no GPU visible its setup.py would pick its CPU
  accelerator and build the op for the host only (refused before compiling, naming the
  variable);
- with ``DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1``: one sm_90 wheel (the docs' example);

then that wheel installed into another copy of .venv-cuda and ``FusedAdamBuilder().load()``
run there with an empty ``TORCH_EXTENSIONS_DIR`` (and ``DS_ACCELERATOR=cuda``: without a GPU,
DeepSpeed's CPU accelerator would pick its own CPU op, which the wheel does not hold).

Usage: python tests/e2e/deepspeed_job.py WORK (steps in WORK/steps.json, job_steps.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from build_helpers import prebuild_env
from job_steps import Steps
from venvs import clone_venv, prepare_cuda_venv

DEEPSPEED = "deepspeed==0.19.8"
# What FusedAdamBuilder().load() returned, and whether anything was compiled for it.
LOAD = """
import json, os, pathlib
from deepspeed.ops.op_builder import FusedAdamBuilder
module = FusedAdamBuilder().load()
extensions = pathlib.Path(os.environ["TORCH_EXTENSIONS_DIR"])
print(json.dumps({"module": module.__name__, "file": module.__file__,
                  "compiled": sorted(str(p) for p in extensions.rglob("*")) if extensions.exists() else []}))
"""


def main(work: Path) -> None:
    steps = Steps(work)
    cuda_venv = prepare_cuda_venv().parent.parent
    python = clone_venv(cuda_venv, work / "venv-build")
    env = prebuild_env(work, python)
    wheel = [str(python), "-m", "prebuild", "wheel", "--arch", "sm_90", DEEPSPEED]
    ways = {
        "DS_ACCELERATOR=cuda": {"DS_ACCELERATOR": "cuda"},
        "DS_BUILD_FUSED_ADAM=1": {"DS_BUILD_FUSED_ADAM": "1"},
        "DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1": {
            "DS_ACCELERATOR": "cuda",
            "DS_BUILD_FUSED_ADAM": "1",
        },
    }
    for what, extra in ways.items():
        out = work / "dist" / what.replace(" ", "_")
        steps.run(what, [*wheel, "--out", str(out)], {**env, **extra}, 3000)
    wheels = list((work / "dist" / "DS_ACCELERATOR=cuda_DS_BUILD_FUSED_ADAM=1").glob("*.whl"))
    if len(wheels) != 1:
        return  # the test says why, from the build's step
    built = wheels[0]
    user = clone_venv(cuda_venv, work / "venv-use")
    # DS_ACCELERATOR=cuda stands in for the GPU DeepSpeed would detect at run time: without one
    # it picks its CPU accelerator, whose FusedAdamBuilder is another op (compiled at first use).
    use_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "DS_BUILD_FUSED_ADAM")}
    use_env["DS_ACCELERATOR"] = "cuda"
    use_env["PATH"] = f"{user.parent}:{env['PATH']}"
    use_env["TORCH_EXTENSIONS_DIR"] = str(work / "torch_extensions")
    if steps.run(
        "install", [str(user), "-m", "pip", "install", "--quiet", str(built)], use_env, 1200
    ):
        steps.run("load", [str(user), "-c", LOAD], use_env, 900)


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
