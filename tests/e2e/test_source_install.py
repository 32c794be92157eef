"""The docs' "Building from source with pip" (docs/getting-started.md) works as written in a fresh
venv, and without the build requirements the build stops at once naming them (pip installs none
of them when build isolation is off). A full build of prebuild's kernels: it runs in the
background from the session's start (source_install_job.py)."""

from __future__ import annotations

import json
import re

import background
import pytest
from build_helpers import docs_block
from job_steps import read_steps
from source_install_job import HEADING

pytestmark = [pytest.mark.slow, pytest.mark.background("source-install")]


def test_documented_source_build_in_a_fresh_venv():
    job, work = background.result("source-install", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    steps = {step["what"]: step for step in read_steps(work)}

    # A fresh venv has torch only: the build names what is missing instead of a traceback.
    bare = steps["bare"]
    assert bare["returncode"] != 0
    said = " ".join((bare["stdout"] + bare["stderr"]).split())
    assert "prebuild's build needs" in said and "ninja" in said and "Traceback" not in said, said
    assert re.search(r"pip install [^\n]*ninja", said), said

    block = docs_block("getting-started.md", HEADING)
    assert "--no-build-isolation" in block and "PREBUILD_ARCHS=sm_86" in block
    docs = steps["docs"]
    assert docs["command"][-1] == block
    assert docs["returncode"] == 0, docs["stdout"][-3000:] + docs["stderr"][-3000:]

    ran = steps["check"]
    assert ran["returncode"] == 0, ran["stderr"]
    result = json.loads(ran["stdout"].strip().splitlines()[-1])
    assert result["file"].startswith(str(work / "venv"))  # the installed copy, not the checkout
    assert result["version"].endswith(".sm86") and result["sass"] == ["sm_86"]
    assert result["ssim"] == pytest.approx(1.0, abs=1e-6)
