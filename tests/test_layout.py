"""The suite's layout rule (tests/suite_layout.py): tests/e2e holds exactly the tests marked slow."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from suite_layout import E2E, misplaced_tests


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
