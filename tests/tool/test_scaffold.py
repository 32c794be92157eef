"""`prebuild new`: the rendered project is valid (pure checks), and end to end (slow): it builds
its sm_80 and sm_90 wheels with `prebuild wheel`, which pass `prebuild inspect` and install and
run on the CPU where prebuild is not installed, next to torch 2.13 and 2.14.1; its own tests
pass after the README's test command, and so does `prebuild selftest` of it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from prebuild.tool.builder.config import parse_config
from prebuild.tool.cli import app
from prebuild.tool.scaffold import (
    TEMPLATES,
    ScaffoldError,
    create,
    project_names,
    render,
    template_files,
)

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_project_names():
    n = project_names("My-Kernels")
    assert (n.name, n.package, n.namespace, n.name_wheel) == (
        "My-Kernels",
        "my_kernels",
        "my_kernels",
        "my_kernels",
    )
    assert project_names("a.b").package == "a_b"
    for bad, message in [
        ("-x", "not a project name"),
        ("1abc", "not a project name"),
        ("a b", "not a project name"),
        ("prebuild", "shadow"),
        ("torch", "shadow"),
    ]:
        with pytest.raises(ScaffoldError, match=message):
            project_names(bad)


def test_every_template_renders_to_valid_files():
    names = project_names("demo-ops")
    rendered = dict(
        render(p.relative_to(TEMPLATES), p.read_text(), names) for p in template_files()
    )
    assert Path("src/demo_ops/ops.py") in rendered and Path(".gitignore") in rendered
    for path, text in rendered.items():
        assert "${" not in text and "__package__" not in str(path), path
        if path.suffix == ".py":
            ast.parse(text, str(path))
    data = tomllib.loads(rendered[Path("pyproject.toml")])
    kernels = parse_config(data["tool"]["prebuild"], data["project"], Path("/p"))
    assert (kernels.package, kernels.namespace, kernels.sources) == (
        "demo_ops",
        "demo_ops",
        Path("/p/csrc"),
    )
    assert (
        kernels.selftest == "demo_ops.selftest:cases"
        and Path("src/demo_ops/selftest.py") in rendered
    )
    assert "STABLE_TORCH_LIBRARY(demo_ops, m)" in rendered[Path("csrc/library.cpp")]


def test_new_refuses_a_used_directory_and_a_bad_name(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    result = runner.invoke(app, ["new", "demo", "--dir", str(tmp_path / "taken")])
    assert result.exit_code == 2 and "not empty" in result.output
    assert (tmp_path / "taken" / "x").read_text() == "mine"
    result = runner.invoke(app, ["new", "no way"])
    assert result.exit_code == 2 and "not a project name" in result.output
    written = create(tmp_path / "fresh", "demo")
    assert len(written) == len(template_files())
