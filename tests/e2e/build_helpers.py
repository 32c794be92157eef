"""Helpers of the build tests (importable by name: tests/e2e is on sys.path)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from prebuild.tool.builder.toolchain import find_nvcc

ROOT = Path(__file__).resolve().parents[2]
PREBUILD = Path(sys.executable).parent / "prebuild"


def run_cli(
    *args: str, cwd: Path = ROOT, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``prebuild ARGS`` in a child, output captured, in a wide terminal."""
    return subprocess.run(
        [str(PREBUILD), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def copy_checkout(dest: Path) -> Path:
    """The committed files of the checkout (a build writes build/ and *.egg-info in place)."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def nvcc_wrapper(directory: Path) -> Path:
    """A directory holding ``nvcc``, a script that execs the real one (as /usr/local/bin/nvcc
    does on our machines: wrappers, environment modules and conda shims are common)."""
    real = find_nvcc().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nvcc").write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    (directory / "nvcc").chmod(0o755)
    return directory


def docs_block(page: str, heading: str) -> str:
    """The first ```bash block after a heading (or any text) of a docs/ page."""
    text = (ROOT / "docs" / page).read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, heading
    return match.group(1)


def prebuild_env(work: Path, python: Path) -> dict[str, str]:
    """The environment of a prebuild command a job (or its test) runs with ``python``, a CUDA
    torch venv's: prebuild from src/, the venv's scripts and an nvcc wrapper (in ``work``) first
    on PATH, CUDA_HOME unset, a home of its own in ``work``."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env.update(
        PYTHONPATH=str(ROOT / "src"),
        COLUMNS="200",
        PATH=f"{python.parent}:{nvcc_wrapper(work / 'wrapper')}:{env['PATH']}",
        HOME=str(work / "home"),
    )
    return env


def prebuild_wheel(
    python: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``prebuild wheel ARGS`` run by the CUDA torch venv's python, prebuild from src/, nvcc
    reached through a wrapper script on PATH, CUDA_HOME unset (``env``: more variables)."""
    extra = env or {}
    with tempfile.TemporaryDirectory(prefix="nvcc-wrapper-") as wrapper:
        env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
        env.update(
            PYTHONPATH=str(ROOT / "src"),
            COLUMNS="200",
            PATH=f"{python.parent}:{nvcc_wrapper(Path(wrapper))}:{os.environ.get('PATH', '')}",
            **extra,
        )
        proc = subprocess.run(
            [str(python), "-m", "prebuild", "wheel", *args],
            capture_output=True,
            text=True,
            timeout=1800,
            env=env,
        )
    if "Building" in proc.stderr:
        assert f"({wrapper}/nvcc)" in proc.stderr, proc.stderr  # the wrapper is the nvcc it used
    return proc


def tree_snapshot(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))
