"""What every test folder shares: the suite's layout rule (tests/suite_layout.py), the
``child_env`` fixture (tests/child_processes.py) and the ``--cpu-cost`` report (tests/cpu_cost.py).
The venvs the end-to-end tests build and run in are tests/e2e/conftest.py's."""

from __future__ import annotations

import pytest
from child_processes import ChildEnv, child_env_for
from cpu_cost import CpuCost
from suite_layout import misplaced_tests, upstream_split


def pytest_addoption(parser) -> None:
    parser.addoption(
        "--cpu-cost",
        action="store_true",
        help="print the CPU time of the costliest tests and files (tests/cpu_cost.py)",
    )
    parser.addoption(
        "--upstream",
        action="store_true",
        help="also run the tests marked upstream: real upstream projects built from the "
        "registry (gsplat 1.5.3, about 1100 s of CPU), left out of the default run",
    )


def pytest_configure(config) -> None:
    if config.getoption("--cpu-cost"):
        config.pluginmanager.register(CpuCost(), "cpu-cost")


def pytest_collection_modifyitems(config, items) -> None:
    misplaced = misplaced_tests(items)
    if misplaced:
        raise pytest.UsageError(
            "end-to-end tests live in tests/e2e and are marked slow; these are not where their "
            "marker says: " + ", ".join(misplaced)
        )
    # Deselected before the session's background jobs start: theirs never does.
    kept, upstream = upstream_split(items, config.getoption("--upstream"))
    if upstream:
        config.hook.pytest_deselected(items=upstream)
        items[:] = kept


@pytest.fixture
def child_env(tmp_path) -> ChildEnv:
    """A child process's clean environment: fresh HOME and TORCH_EXTENSIONS_DIR under tmp_path."""
    return child_env_for(tmp_path)
