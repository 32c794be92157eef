"""The files that put prebuild's guard (``prebuild.runtime.classic_guard``) into a classic wheel.

Added beside the project's own files, none of which is changed:

- ``_prebuild_guard_<name>/``: a copy of prebuild's runtime (self-contained, torch only), so the
  wheel needs nothing of prebuild at run time;
- ``_prebuild_guard_<name>.pth``: one line, run by Python's ``site`` at start-up, that installs
  the guard with what it must know of this wheel (its packages, its prebuilt modules, where its
  ``prebuild.json`` is, what to build it from, the libraries of its first-use compiles);
- ``_prebuild_guard_<name>/jit/``: those libraries, where the project compiles at first use
  (jit_ahead.py).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from pathlib import Path

from prebuild import runtime
from prebuild.tool.inspection import exports_symbol, is_shared_library

GUARD_PREFIX = "_prebuild_guard_"


def guard_package(distribution: str) -> str:
    """``_prebuild_guard_gsplat``: the guard's import name for a distribution (its wheel-file
    spelling, lower case: an identifier unless the name starts with a digit)."""
    name = re.sub(r"[^A-Za-z0-9]+", "_", distribution).lower()
    return GUARD_PREFIX + name


def top_level_names(names: list[str]) -> list[str]:
    """Pure: the import names a wheel installs (its packages and top-level modules), from the
    paths inside it; not its .dist-info/.data, nor a guard."""
    found = set()
    for name in names:
        first, _, rest = name.partition("/")
        if first.endswith((".dist-info", ".data")) or first.startswith(GUARD_PREFIX):
            continue
        if rest:  # a package's file
            if first.isidentifier():
                found.add(first)
        elif first.endswith(".py") or is_shared_library(first):
            stem = first.split(".")[0]
            if stem.isidentifier():
                found.add(stem)
    return sorted(found)


def module_name(path: str) -> str:
    """``gsplat.csrc`` for ``gsplat/csrc.cpython-311-x86_64-linux-gnu.so`` (or ``csrc.so``)."""
    *parents, file = path.split("/")
    return ".".join([*parents, file.split(".")[0]])


def extension_modules(wheel: Path) -> list[str]:
    """The Python extension modules among the wheel's shared libraries (those exporting
    ``PyInit_<name>``; a plain shared library is loaded by other means, never imported)."""
    found = []
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(n for n in zf.namelist() if is_shared_library(n)):
            module = module_name(name)
            if exports_symbol(zf.read(name), "PyInit_" + module.rpartition(".")[2]):
                found.append(module)
    return found


def build_spec(origin: str, distribution: str, version: str) -> str:
    """What a user passes to ``prebuild wheel`` to build the project again: the requirement or
    URL it was built from, or ``name==version`` for a local source (its path means nothing on
    another machine; the registry may have it)."""
    if Path(origin).expanduser().exists() or origin in ("", "."):
        return f"{distribution}=={version}"
    return origin


def guard_files(
    wheel: Path,
    distribution: str,
    version: str,
    dist_info: str,
    origin: str,
    jit: Mapping[str, list[dict[str, str]]] | None = None,
) -> dict[str, str]:
    """Path in the wheel -> text, for the guard of ``wheel`` (built of ``origin``), whose
    .dist-info directory will be ``dist_info`` (``gsplat-1.5.3+pt214.cu130.sm90.dist-info``)
    and whose public version is ``version``; ``jit``: the builds of its first-use compiles it
    holds (jit_ahead.FirstUse.served), which the guard hands to the project's calls."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    package = guard_package(distribution)
    config = {
        "distribution": distribution,
        "version": version,
        "packages": top_level_names(names),
        "modules": extension_modules(wheel),
        "manifest": f"{dist_info}/prebuild.json",
        "build": build_spec(origin, distribution, version),
        "jit": dict(jit or {}),
    }
    files = {
        f"{package}/{source.name}": source.read_text(encoding="utf-8")
        for source in map(Path, runtime.source_files())
    }
    # site runs a .pth line that starts with "import" as Python: one line, nothing else.
    files[f"{package}.pth"] = (
        f"import {package}.classic_guard as guard; guard.install({config!r})\n"
    )
    return files
