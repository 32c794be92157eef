"""scripts/gpu_check.sh --dry-run, as CI runs it on a machine without a GPU: every step that can
run without one does (the wheel is built for sm_80 with the shared objects of this test session,
installed into a venv that sees this Python's torch, the CUDA tests collected and each skipped,
prebuild selftest on the CPU, the bench's cuda section run on the CPU), the GPU-only steps say
why they are skipped, and the report is written. (Here, beside the builder tests, for their shared build directory.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pip_env import clean_pip_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_runs_what_needs_no_gpu_and_writes_the_report(
    built_wheel, shared_objects, tmp_path
):
    built_wheel("sm_80")  # its objects: the dry run only packages
    out = tmp_path / "report"
    # its install step is offline from --deps (nothing fetched here): none of the machine's
    # pip settings, which could bring what the folder lacks
    env = clean_pip_env(PYTHON=sys.executable)
    proc = subprocess.run(
        [
            str(ROOT / "scripts" / "gpu_check.sh"),
            "--dry-run",
            str(out),
            "--arch",
            "sm_80",
            "--objects",
            str(shared_objects),
            "--deps",
            str(tmp_path / "no-deps"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((out / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert report["dry_run"] is True
    assert list(steps) == [
        "facts",
        "build",
        "install",
        "cuda",
        "selftest",
        "gsplat",
        "peers",
        "bench",
    ]
    assert steps["facts"]["summary"].endswith("no GPU visible")
    assert (
        steps["build"]["status"] == "passed"
        and "+cu130.sm80-cp310-abi3" in steps["build"]["summary"]
    )
    assert steps["install"]["status"] == "passed"
    # Every CUDA test collected, none run, none failed: each skipped with its reason.
    cuda = steps["cuda"]
    assert cuda["status"] == "skipped" and cuda["data"]["tests"] > 0
    assert (
        cuda["data"]["skipped"] == cuda["data"]["tests"]
        and cuda["data"]["failures"] == cuda["data"]["errors"] == 0
    )
    assert steps["selftest"]["status"] == "passed" and "no GPU" in steps["selftest"]["summary"]
    assert steps["gsplat"]["status"] == "skipped" and "needs a GPU" in steps["gsplat"]["summary"]
    assert steps["peers"]["status"] == "skipped" and "needs a GPU" in steps["peers"]["summary"]
    # the bench step runs the cuda section's code on the CPU, tiny sizes, and says so
    bench = steps["bench"]
    assert bench["status"] == "passed" and bench["summary"].endswith(
        "(dry run: the section's code on the CPU, tiny sizes)"
    )
    assert (
        "vs plain conv2d" in bench["summary"] and bench["data"]["ssim"] and bench["data"]["raster"]
    )
    assert all(s["seconds"] <= s["limit"] for s in report["steps"])
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# GPU check (dry run: no GPU)") and "| cuda | skipped |" in markdown
    assert (
        "## bench: the CUDA kernels against their peers" in markdown
        and (out / "bench" / "benchmarks.json").is_file()
    )
