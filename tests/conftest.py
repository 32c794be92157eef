"""Fixtures every test folder may use.

``fresh_venv``: a new venv holding only the CPU torch 2.13.0 (what a user has after
``python -m venv`` and ``pip install torch==2.13.0``). Installing torch costs ~25 s, so it is
installed once per session into a template, and each test gets a hard-linked copy (~0.3 s).
pip and Python replace files (rename, unlink) rather than write into them, so nothing a test
installs or removes in its copy reaches the template. The copy's scripts (``bin/pip``, ...)
are rewritten to name its own interpreter, so ``pip`` on its PATH installs into the copy.
"""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path
from typing import Callable

import pytest

TEMPLATE_TORCH = "torch==2.13.0"


@pytest.fixture(scope="session")
def _venv_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv-template") / "venv"
    venv.create(path, with_pip=True)
    subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    TEMPLATE_TORCH], check=True, timeout=1200)  # fmt: skip
    return path


@pytest.fixture
def fresh_venv(_venv_template, tmp_path) -> Callable[[str], Path]:
    """``fresh_venv(name="venv")`` -> the python of a new venv under tmp_path with torch only."""

    def make(name: str = "venv") -> Path:
        target = tmp_path / name
        subprocess.run(["cp", "-al", str(_venv_template), str(target)], check=True)
        for script in (target / "bin").iterdir():
            if script.is_symlink() or not script.is_file():
                continue
            data = script.read_bytes()
            if data.startswith(b"#!") and str(_venv_template).encode() in data.split(b"\n", 1)[0]:
                fixed = script.with_name(script.name + ".tmp")  # a new file: the template keeps its own
                fixed.write_bytes(data.replace(str(_venv_template).encode(), str(target).encode(), 1))
                fixed.chmod(script.stat().st_mode)
                fixed.replace(script)
        python = target / "bin" / "python"
        assert python.exists(), target
        return python

    return make
