"""New torch releases for a [farm] table (the daily job's logic), and its script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prebuild.tool.farm.recipes import parse_recipes
from prebuild.tool.farm.releases import new_minors, with_torch

ROOT = Path(__file__).resolve().parents[3]
PYPI = ["2.13.0", "2.14.0", "2.14.1", "2.15.0rc1", "2.15.0.dev20261101", "garbage", "1.13.1"]


def test_only_final_minors_newer_than_the_table():
    assert new_minors(("2.13", "2.14"), PYPI) == []
    assert new_minors(("2.13", "2.14"), [*PYPI, "2.15.0", "2.16.1"]) == ["2.15", "2.16"]
    assert new_minors((), ["2.14.1", "2.13.0"]) == ["2.13", "2.14"]


def test_the_torch_line_gains_the_new_ones_and_nothing_else_changes():
    text = '# set\n[farm]\ntorch = ["2.13", "2.14"]  # kept\ncuda = ["13.0"]\n'
    changed = with_torch(text, ["2.15"])
    assert changed == '# set\n[farm]\ntorch = ["2.13", "2.14", "2.15"]  # kept\ncuda = ["13.0"]\n'
    assert parse_recipes(changed, Path("f.toml")).defaults.torch == ("2.13", "2.14", "2.15")
    assert with_torch(changed, ["2.15"]) == changed
    with pytest.raises(ValueError, match="no `torch = \\[...\\]` line"):
        with_torch("[farm]\ncuda = []\n", ["2.15"])


def test_the_starter_sets_table_is_read_by_the_script(tmp_path):
    """The script reads recipes/farm.toml (the network part, PyPI's list, is not called here)."""
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; sys.path.insert(0, 'scripts/ci'); import farm_new_torch as f; "
         "f.released_torch = lambda: ['2.13.0', '2.99.0']; "
         f"import pathlib, shutil; d = pathlib.Path({str(tmp_path / 'farm.toml')!r}); "
         "shutil.copy('recipes/farm.toml', d); print(f.main(d)); print(d.read_text())"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    added, _, text = proc.stdout.partition("\n")
    assert added == "2.99" and '"2.99"]' in text
