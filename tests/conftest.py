"""What every test folder shares: the suite's layout rule (tests/suite_layout.py) and the
``child_env`` fixture (tests/child_processes.py). The venvs the end-to-end tests build and run in
are tests/e2e/conftest.py's."""

from __future__ import annotations

import pytest
from child_processes import ChildEnv, child_env_for
from suite_layout import misplaced_tests


def pytest_collection_modifyitems(config, items) -> None:
    misplaced = misplaced_tests(items)
    if misplaced:
        raise pytest.UsageError(
            "end-to-end tests live in tests/e2e and are marked slow; these are not where their "
            "marker says: " + ", ".join(misplaced)
        )


@pytest.fixture
def child_env(tmp_path) -> ChildEnv:
    """A child process's clean environment: fresh HOME and TORCH_EXTENSIONS_DIR under tmp_path."""
    return child_env_for(tmp_path)
