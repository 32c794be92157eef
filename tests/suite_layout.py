"""The suite's layout rule: the end-to-end tests (real wheels, venvs, peers' suites) live in
tests/e2e, every one marked slow, and only they are marked slow, so that `pytest -m "not slow"` and
`pytest --ignore=tests/e2e` are the same fast part. tests/conftest.py refuses a run that breaks it.
And the tests marked upstream (a real upstream project built at length) run only with
`--upstream`: the default run must fit CI's time.
Importable by name: pytest puts tests/ on sys.path for tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

E2E = Path(__file__).resolve().parent / "e2e"


def misplaced_tests(items) -> list[str]:
    """The collected tests that break the rule: slow outside tests/e2e, or not slow in it."""
    return [
        item.nodeid
        for item in items
        if (E2E in Path(item.path).parents) != (item.get_closest_marker("slow") is not None)
    ]


def upstream_split(items, run_upstream: bool) -> tuple[list, list]:
    """The tests a run keeps and those it deselects: the ones marked upstream unless
    ``run_upstream`` (``pytest --upstream``)."""
    if run_upstream:
        return list(items), []
    kept = [item for item in items if item.get_closest_marker("upstream") is None]
    return kept, [item for item in items if item.get_closest_marker("upstream") is not None]
