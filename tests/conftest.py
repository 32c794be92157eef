"""What every test folder shares: the suite's layout rule (tests/suite_layout.py). The venvs the
end-to-end tests build and run in are tests/e2e/conftest.py's."""

from __future__ import annotations

import pytest
from suite_layout import misplaced_tests


def pytest_collection_modifyitems(config, items) -> None:
    misplaced = misplaced_tests(items)
    if misplaced:
        raise pytest.UsageError(
            "end-to-end tests live in tests/e2e and are marked slow; these are not where their "
            "marker says: " + ", ".join(misplaced)
        )
