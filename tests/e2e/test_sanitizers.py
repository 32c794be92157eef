"""Every CUDA kernel body (through the simt library) and every CPU kernel, run by the op
tests under AddressSanitizer and UndefinedBehaviorSanitizer, reports no error
(scripts/sanitize.sh: its own venv, instrumented libraries, sanitizer runtimes preloaded)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.simt]

ROOT = Path(__file__).resolve().parents[2]


def test_simt_and_cpu_kernels_are_clean_under_asan_and_ubsan():
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "sanitize.sh"), "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    output = proc.stdout + proc.stderr
    assert "AddressSanitizer" not in output and "runtime error:" not in output, output[-6000:]
    assert proc.returncode == 0, output[-6000:]
    closing = proc.stdout.strip().splitlines()[-1]  # pytest's summary line
    summary = re.search(r"(\d+) passed", closing)
    assert summary and int(summary.group(1)) > 150 and "failed" not in closing, closing
