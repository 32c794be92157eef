"""`prebuild new` end to end: the new project builds its sm_80 and sm_90 wheels with `prebuild wheel`,
which pass `prebuild inspect` and install and run on the CPU where prebuild is not installed, next
to torch 2.13 and 2.14.1; its own tests pass after the README's test command, and so does
`prebuild selftest` of it. Builds and three venvs: it runs in the background from the session's
start (new_project_job.py)."""

from __future__ import annotations

import json

import background
import pytest
from job_steps import read_steps
from new_project_job import PYTHONS

pytestmark = [pytest.mark.slow, pytest.mark.background("new-project")]


def test_a_new_project_builds_installs_without_prebuild_and_passes_its_tests():
    job, work = background.result("new-project", timeout=3600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    steps = {step["what"]: step for step in read_steps(work)}
    for what in ("new", "wheel"):
        assert steps[what]["returncode"] == 0, steps[what]["stderr"][-4000:]
    wheels = sorted(p.name for p in (work / "dist").glob("*.whl"))
    assert wheels == [
        f"demo-0.1.0+cu130.{sm}-cp310-abi3-linux_x86_64.whl" for sm in ("sm80", "sm90")
    ]
    for wheel in wheels:
        inspected = steps[f"inspect {wheel}"]
        assert (
            inspected["returncode"] == 0
            and "The binaries match the manifest." in inspected["stdout"]
        ), inspected["stdout"]
    for name, torch in zip(PYTHONS, ("2.13.0", "2.14.1")):
        installed, ran = steps[f"install {name}"], steps[f"run {name}"]
        assert installed["returncode"] == 0, installed["stderr"]
        assert ran["returncode"] == 0, ran["stderr"]
        values, version = ran["stdout"].split("\n")[-2].rsplit(" ", 1)
        assert values == "[0.5, 1.5, 2.5, 3.5]" and version.startswith(torch), ran["stdout"]

    assert steps["editable"]["returncode"] == 0, steps["editable"]["stderr"][-4000:]
    tests = steps["tests"]
    assert tests["returncode"] == 0, tests["stdout"][-4000:]
    assert "11 passed" in tests["stdout"] and "skipped" not in tests["stdout"], tests["stdout"][
        -2000:
    ]
    # Its selftest hook, recorded in the manifest of the editable install: scale_add against
    # plain PyTorch on the CPU (no GPU here).
    checked = steps["selftest"]
    assert checked["returncode"] == 0, checked["stdout"][-4000:] + checked["stderr"][-4000:]
    rows = [
        (r["package"], r["device"], r["op"], r["status"], r["against"])
        for r in json.loads(checked["stdout"])["rows"]
    ]
    assert rows == [("demo", "cpu", "scale_add", "pass", "reference")], rows
