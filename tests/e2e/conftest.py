"""Real wheels for the slow tests, each built once per session.

Every test that only needs *a* real wheel takes it from ``built_wheel``: one objects
directory (``shared_objects``) for all of them, so the CPU code is compiled once, each CUDA
arch set once, and each wheel packaged once. Tests that must compile (interrupted builds,
other toolchains, a planted error) use their own directories; those whose subject is the tool
and not prebuild's kernels (the compile cache, an interrupted build, PyPI's nvcc) build copies
of the smallest native project instead (``small_native_project``: one op, seconds to compile)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from build_helpers import run_cli


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
