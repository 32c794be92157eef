"""DeepSpeed 0.19.8 as published, tried as a new user would (docs/classic-projects.md): a project
that builds its ops at install time only when asked. Refused when no op is asked for, naming
DeepSpeed's own switches; refused before compiling when the op is asked for but DeepSpeed would
pick its CPU accelerator (no GPU here), naming DS_ACCELERATOR; built with DS_ACCELERATOR=cuda
DS_BUILD_FUSED_ADAM=1 into an sm_90 wheel whose op FusedAdamBuilder().load() takes without
compiling. The builds run in the background from the session's start (deepspeed_job.py)."""

from __future__ import annotations

import json

import background
import pytest
from deepspeed_job import DEEPSPEED
from job_steps import read_steps
from test_classic_build import all_sass, wheel_contents

from prebuild.tool.inspection import library_code

pytestmark = [pytest.mark.slow, pytest.mark.background("deepspeed")]


def test_deepspeed_fused_adam_is_prebuilt_only_when_asked_and_then_never_compiles():
    job, work = background.result("deepspeed", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    steps = {step["what"]: step for step in read_steps(work)}

    plain = steps["DS_ACCELERATOR=cuda"]
    said = " ".join(plain["stderr"].split())
    assert plain["returncode"] == 1, said
    assert "holds no compiled library" in said and "build/lib" not in said
    assert "DS_BUILD_FUSED_ADAM=1" in said and "DS_ACCELERATOR=cuda" in said
    assert f"prebuild wheel --arch sm_90 {DEEPSPEED}" in said

    # with no GPU visible DeepSpeed would build the op for its CPU accelerator: refused at once
    host = steps["DS_BUILD_FUSED_ADAM=1"]
    said = " ".join(host["stderr"].split())
    assert host["returncode"] == 2, said
    assert "would build for the CPU only unless DS_ACCELERATOR=cuda" in said, said
    assert "nothing was compiled" in said and "Building" not in said
    assert (
        f"DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1 prebuild wheel --arch sm_90 {DEEPSPEED}" in said
    )

    built = steps["DS_ACCELERATOR=cuda DS_BUILD_FUSED_ADAM=1"]
    assert built["returncode"] == 0, built["stdout"][-3000:] + built["stderr"][-6000:]
    (wheel,) = (work / "dist" / "DS_ACCELERATOR=cuda_DS_BUILD_FUSED_ADAM=1").glob("*.whl")
    assert wheel.name.startswith("deepspeed-0.19.8+pt214.cu130.sm90-")
    manifest, metadata, libraries = wheel_contents(wheel)
    assert "Requires-Dist: torch>=2.14,<2.15" in metadata.splitlines()
    (name,) = [n for n in libraries if "fused_adam_op" in n]
    assert all_sass(library_code(libraries[name], name)) == ["sm_90"]
    assert manifest["sass_archs"] == ["sm_90"]

    assert steps["install"]["returncode"] == 0, steps["install"]["stderr"][-3000:]
    load = steps["load"]
    assert load["returncode"] == 0, load["stderr"][-3000:]
    loaded = json.loads(load["stdout"].strip().splitlines()[-1])
    assert "site-packages/deepspeed/ops/adam/fused_adam_op" in loaded["file"], loaded
    assert not any(p.endswith(".so") or p.endswith(".o") for p in loaded["compiled"]), loaded
