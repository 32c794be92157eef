"""One objects directory for the slow tests that only need *a* real wheel: the first build
compiles, later ones of the same archs only package (seconds instead of ~20 s each)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_objects(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shared-objects")
