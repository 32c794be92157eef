"""Helpers of the build tests (importable by name: tests/e2e is on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREBUILD = Path(sys.executable).parent / "prebuild"


def run_cli(
    *args: str, cwd: Path = ROOT, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``prebuild ARGS`` in a child, output captured, in a wide terminal."""
    return subprocess.run(
        [str(PREBUILD), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
