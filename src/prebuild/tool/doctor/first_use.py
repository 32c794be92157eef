"""The installed packages that will compile at first use: they ship CUDA sources and call
torch.utils.cpp_extension's JIT builder (the scan ``prebuild wheel`` does on a project), and hold
no prebuilt extension module (gsplat from PyPI, for one). Each such import compiles on every
machine and in every fresh environment, racing other processes for the extensions directory's
lock: ``prebuild doctor`` names them with the ``prebuild wheel`` command that ends it.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prebuild.tool.builder.guard_files import GUARD_PREFIX
from prebuild.tool.inspection import is_shared_library
from prebuild.tool.jit_sites import jit_sites_in

CUDA_SOURCES = (".cu", ".cuh")


@dataclass(frozen=True)
class CompilesAtFirstUse:
    name: str
    version: str
    sites: tuple[str, ...]  # "gsplat/cuda/_backend.py:80"
    cuda_sources: int


def compiles_at_first_use(
    files: list[str], read: Callable[[Path], str], limit: int = 3
) -> tuple[tuple[str, ...], int] | None:
    """Pure over a distribution's files (paths relative to its site directory) and a reader
    of their text: (JIT call sites, CUDA sources) when it compiles at first use, else None."""
    cuda = [f for f in files if f.endswith(CUDA_SOURCES)]
    if not cuda or any(is_shared_library(f) for f in files):
        return None  # nothing to compile, or something prebuilt (the guard covers those)
    if any(f.startswith(GUARD_PREFIX) for f in files):
        return None
    sites = jit_sites_in((Path(f) for f in files if f.endswith(".py")), None, limit, read=read)
    return (tuple(sites), len(cuda)) if sites else None


def installed_compilers(path: list[str] | None = None) -> list[CompilesAtFirstUse]:
    """The distributions on ``path`` (default sys.path) that will compile at first use."""
    found = []
    dists = importlib.metadata.distributions(**({"path": path} if path else {}))
    for dist in dists:
        files = [str(f) for f in dist.files or ()]
        if not any(f.endswith(CUDA_SOURCES) for f in files):
            continue
        root = Path(str(dist.locate_file("")))
        result = compiles_at_first_use(
            files, lambda p, root=root: (root / p).read_text(encoding="utf-8", errors="replace")
        )
        if result is not None:
            sites, cuda = result
            found.append(CompilesAtFirstUse(dist.metadata["Name"], dist.version, sites, cuda))
    return sorted(found, key=lambda c: c.name.lower())
