"""The tree passes ruff as configured in pyproject.toml: the lint rules, and the formatter's
layout (so that no diff is ever about whitespace)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(command):
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"ruff {' '.join(command)} found:\n{proc.stdout}{proc.stderr}"
