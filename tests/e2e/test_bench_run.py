"""scripts/bench.py run for real at its quick settings: every output well formed. A minute of
one subprocess (it compiles, loads and starts processes): it runs in the background from the
session's start (background.py's "bench-quick")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import background
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench.py"

pytestmark = [pytest.mark.slow, pytest.mark.background("bench-quick")]


def test_quick_run_writes_well_formed_outputs(tmp_path):
    proc, work = background.result("bench-quick", timeout=1800)
    out = work / "docs"
    assert proc.returncode == 0, proc.stderr[-4000:]

    results = json.loads((out / "benchmarks.json").read_text())
    assert results["quick"] is True
    assert results["sections"] == ["build", "load", "contention", "cpu", "gpu", "cuda"]
    assert results["cuda"]["skipped"].startswith(
        "no CUDA GPU visible"
    )  # none here: said, not faked
    for name in results["sections"]:
        assert results[name], name
    for row in results["contention"]["rows"]:
        assert row["ok"] + row["failed"] + row["hung"] == row["n"] * row["runs"]
    assert all(r["registers"] > 0 for r in results["gpu"]["rows"]) and results["gpu"]["rows"]

    md = (out / "benchmarks.md").read_text()
    for heading in (
        "# Benchmarks",
        "## 1. Build",
        "## 2. Load",
        "## 3. Contention",
        "## 4. CPU kernels",
        "## 5. GPU resources",
        "## 6. CUDA kernels\n\nNot measured: no CUDA GPU visible",
    ):
        assert heading in md
    assert "scripts/bench.py --quick" in md and "Machine:" in md
    for line in md.splitlines():  # every table row has as many cells as its header
        if line.startswith("|"):
            assert line.endswith("|")

    png = (out / "benchmarks.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    # --report-from rewrites the same report from the JSON without measuring anything.
    again = tmp_path / "again"
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--report-from",
            str(out / "benchmarks.json"),
            "--out",
            str(again),
        ],
        check=True,
        timeout=120,
    )
    assert (again / "benchmarks.md").read_text() == md and (again / "benchmarks.png").exists()
