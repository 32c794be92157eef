"""Every CUDA kernel body (through the simt library) and every CPU kernel, run by the op
tests under AddressSanitizer and UndefinedBehaviorSanitizer, reports no error
(scripts/sanitize.sh: its own venv, instrumented libraries, sanitizer runtimes preloaded).
Minutes of work for the CPU alone: it runs in the background from the session's start."""

from __future__ import annotations

import re

import background
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.simt, pytest.mark.background("sanitize")]


def test_simt_and_cpu_kernels_are_clean_under_asan_and_ubsan():
    proc, _ = background.result("sanitize", timeout=3600)  # scripts/sanitize.sh -q
    output = proc.stdout + proc.stderr
    assert "AddressSanitizer" not in output and "runtime error:" not in output, output[-6000:]
    assert proc.returncode == 0, output[-6000:]
    closing = proc.stdout.strip().splitlines()[-1]  # pytest's summary line
    summary = re.search(r"(\d+) passed", closing)
    assert summary and int(summary.group(1)) > 150 and "failed" not in closing, closing
