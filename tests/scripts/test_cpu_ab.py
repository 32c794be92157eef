"""scripts/cpu_ab.py: both builds are measured from their own trees, in rounds, into one
table; bad arguments are refused by name (its numbers are not judged here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "cpu_ab.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_quick_run_measures_both_builds():
    proc = run(str(ROOT), str(ROOT), "--quick", "--rounds", "1", "--repeats", "1")
    assert proc.returncode == 0, proc.stderr
    rounds = [line for line in proc.stderr.splitlines() if line.startswith("round ")]
    assert [r.split(":")[1].split()[0] for r in rounds] == ["before", "after"]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("| step (PREBUILD_CPU_ISA=")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert set(rows) == {"fused_ssim B=1 32x32", "rasterization 100 Gaussians"}
    for line in rows.values():
        cells = line.strip("| ").split(" | ")[1:]
        assert len(cells) == 2 and all(cell.count("(") == 1 for cell in cells)  # one stat per round


def test_a_tree_without_built_libraries_is_refused(tmp_path):
    proc = run(str(tmp_path), str(ROOT), "--quick")
    assert proc.returncode == 2 and "holds no built library" in proc.stderr


def test_unknown_ops_are_refused():
    proc = run(str(ROOT), str(ROOT), "--ops", "conv")
    assert proc.returncode == 2 and "--ops takes ssim, raster" in proc.stderr
