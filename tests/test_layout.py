"""The suite's layout rule (tests/suite_layout.py): tests/e2e holds exactly the tests marked slow."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from suite_layout import E2E, misplaced_tests, upstream_split


def item(path, slow: bool):
    marker = pytest.mark.slow.mark if slow else None
    return SimpleNamespace(
        nodeid=str(path),
        path=path,
        get_closest_marker=lambda name: marker if name == "slow" else None,
    )


def test_slow_tests_live_in_e2e_and_only_there():
    good = [item(E2E / "test_a.py", True), item(E2E.parent / "tool" / "test_b.py", False)]
    assert misplaced_tests(good) == []
    bad = [item(E2E / "test_c.py", False), item(E2E.parent / "ops" / "test_d.py", True)]
    assert misplaced_tests(bad) == [
        str(E2E / "test_c.py"),
        str(E2E.parent / "ops" / "test_d.py"),
    ]


def test_upstream_tests_run_only_when_asked():
    def marked(name: str, *markers: str):
        return SimpleNamespace(
            nodeid=name, get_closest_marker=lambda m: object() if m in markers else None
        )

    gsplat, plain = marked("gsplat", "slow", "upstream"), marked("plain", "slow")
    assert upstream_split([gsplat, plain], run_upstream=False) == ([plain], [gsplat])
    assert upstream_split([gsplat, plain], run_upstream=True) == ([gsplat, plain], [])


def test_the_default_run_leaves_gsplats_real_build_out():
    """Collected as CI collects (no --upstream): deselected, its background build never started."""
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         str(E2E / "test_gsplat_build.py")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "no tests collected (2 deselected)" in ran.stdout, ran.stdout + ran.stderr
    assert "in the background" not in ran.stdout
