"""The one list of the public ops (``prebuild.ops.OPS``): what ``prebuild`` and ``prebuild.ops``
export, what type checkers see, and what ``prebuild doctor`` lists all come from it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import prebuild
import prebuild.ops
from prebuild.ops import OPS

OPS_DIR = Path(prebuild.ops.__file__).parent


def type_checking_imports(path: Path) -> dict[str, str]:
    """name -> module of the ``from M import name`` lines under ``if TYPE_CHECKING:``."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for imp in node.body:
                found.update({alias.name: imp.module for alias in imp.names})
    return found


def test_what_type_checkers_see_is_the_list():
    assert type_checking_imports(OPS_DIR / "__init__.py") == OPS
    # the package above takes them from prebuild.ops, not from a list of its own
    assert type_checking_imports(OPS_DIR.parent / "__init__.py") == {"*": "prebuild.ops"}


def test_every_op_is_exported_from_both_packages_by_its_module():
    assert sorted(prebuild.__all__) == sorted(
        [*OPS, "__version__"]
    ) and prebuild.ops.__all__ == sorted(OPS)
    for name, module in OPS.items():
        defined = getattr(importlib.import_module(module), name)
        assert getattr(prebuild, name) is defined and getattr(prebuild.ops, name) is defined, name
        assert name in dir(prebuild) and name in dir(prebuild.ops)


def test_ops_import_nothing_from_the_package_above():
    for path in sorted(OPS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                above = (node.level == 0 and node.module == "prebuild") or node.level >= 2
                assert not above, (path.name, node.module)


def test_doctor_lists_the_same_ops():
    from prebuild.tool.doctor import gather

    assert gather(check_load=False).ops == tuple(sorted(OPS))
