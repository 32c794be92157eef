"""The venvs of other torch releases (``.venv-torch-<version>`` in the checkout: CUDA builds
from the registry, gigabytes each) for test_torch_versions.py.

Downloading them is the network's work, not the CPU's, so when the session will use them they
are made in the background from the start of the session (``prefetch``, called by this
folder's conftest once the tests are collected), while other tests compile; ``ensure`` waits
for one. Only where the disk has room for all of them at once: otherwise each is made when
its test starts, and removed after it (test_torch_versions.py), one at a time."""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import background
import pytest

from prebuild.tool.farm.envs import uv_binary, uv_environment

ROOT = Path(__file__).resolve().parents[2]
GB = 1 << 30
NEEDED_FREE = (
    12 * GB
)  # a CUDA build of torch: 7.0 GB installed (2.10.0, CUDA 12.8), its downloads beside
KEEP_FREE = 40 * GB  # a venv is kept for the next run only if this much stays free
PREFETCH_SPARE = 10 * GB  # what must stay free while all of them download at once
# torch from the machine's indexes, with its pip settings (a mirror, find-links), but for one:
# pip's configuration caps torch here; an empty constraint file lifts the cap for these venvs.
# No cache: pip would keep a second copy of the gigabytes it downloads.
UNCAPPED = {
    **os.environ,
    "PIP_CONSTRAINT": "/dev/null",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
}


@functools.cache
def install_env() -> dict[str, str]:
    """The environment of _install's uv: pip's settings handed over as the farm does, but
    for the cap on torch (UNCAPPED's empty constraint file), and no cache either."""
    return {**uv_environment(UNCAPPED), "UV_NO_CACHE": "1"}


def versions_to_check(oldest: str, newest: str) -> list[str]:
    """The releases test_torch_versions.py checks: the oldest the target allows and the newest,
    or PREBUILD_TORCH_VERSIONS (scripts/torch_versions.sh: every release in between)."""
    return os.environ.get("PREBUILD_TORCH_VERSIONS", f"{oldest},{newest}").split(",")


def venv_path(version: str) -> Path:
    return ROOT / f".venv-torch-{version}"


def _install(version: str) -> list[str]:
    # uv, not pip: the same files from the same indexes (pip's settings handed to it,
    # install_env()) for about 60 % of pip's CPU time (38 against 64 s for torch 2.15.0's 5.3 GB,
    # 2026-11-29), and no byte-compiling (uv's default; the test imports torch there once).
    # numpy as most torch users have it (torch warns without it).
    python = venv_path(version) / "bin" / "python"
    return [
        uv_binary(),
        "pip",
        "install",
        "--quiet",
        "--python",
        str(python),
        f"torch=={version}",
        "numpy",
    ]


def _job(version: str) -> str:
    return f"torch-{version}"


def prefetch(versions: list[str]) -> list[str]:
    """Start making the missing venvs of ``versions`` in the background (background.py), all at
    once, if the disk has room for all of them; returns the versions started."""
    missing = [
        v
        for v in versions
        if not (venv_path(v) / "bin" / "python").exists() and not background.started(_job(v))
    ]
    if not missing or shutil.disk_usage(ROOT).free < len(missing) * NEEDED_FREE + PREFETCH_SPARE:
        return []
    for version in missing:
        make = f"{shlex.quote(sys.executable)} -m venv {shlex.quote(str(venv_path(version)))}"
        background.start(
            _job(version),
            ["bash", "-c", f"{make} && {shlex.join(_install(version))}"],
            env=install_env(),
        )
    return missing


def ensure(version: str) -> Path:
    """The python of ``.venv-torch-<version>`` with that torch: waits for its background
    download, or makes it now. uv's second run finds it installed (or finishes what a stopped
    download left, and says what failed)."""
    if background.started(_job(version)):
        background.result(_job(version), timeout=3000)
    path = venv_path(version)
    python = path / "bin" / "python"
    if not python.exists():
        free = shutil.disk_usage(ROOT).free
        if free < NEEDED_FREE:
            pytest.fail(
                f"torch {version} needs {NEEDED_FREE / GB:.0f} GB free on {ROOT}'s disk, "
                f"which has {free / GB:.1f} GB free"
            )
        venv.create(path, with_pip=True)
    subprocess.run(_install(version), check=True, timeout=3000, env=install_env())
    return python


def release(version: str) -> None:
    """After its test: the venv stays for the next run only while the disk keeps KEEP_FREE."""
    if shutil.disk_usage(ROOT).free < KEEP_FREE:
        shutil.rmtree(venv_path(version), ignore_errors=True)
