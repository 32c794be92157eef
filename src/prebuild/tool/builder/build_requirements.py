"""A classic project's build requirements against this environment: prebuild builds without
isolation, so a requirement is met by what is installed; a torch pin, or a pin for an isolated
build, is noted rather than installed."""

from __future__ import annotations

import importlib.metadata
import shlex
from collections.abc import Callable, Sequence

from packaging.requirements import Requirement

from prebuild.tool.builder.relabel import is_torch_requirement
from prebuild.tool.builder.source_gaps import SUBMODULES_FIX


def split_torch_pins(
    unmet: set[tuple[str, ...]],
) -> tuple[set[tuple[str, ...]], list[str]]:
    """Pure: the build requirements not met here (``ProjectBuilder.check_dependencies``: each a
    chain from the project's requirement to the one unmet), less those on torch itself, and
    those torch requirements. A project's ``torch==2.5.1`` is for an isolated build, which pip
    gives that torch; prebuild builds against the torch installed (the one the wheel is for:
    it pins it), so installing the one asked for would build a wheel for another torch."""
    torch = {chain for chain in unmet if chain and is_torch_requirement(chain[-1])}
    return unmet - torch, sorted({chain[-1] for chain in torch})


def split_installed(
    unmet: set[tuple[str, ...]], installed_version: Callable[[str], str | None]
) -> tuple[set[tuple[str, ...]], list[str]]:
    """Pure but for ``installed_version`` (a distribution's version, None if absent): the unmet
    build requirements that are absent, and those installed at another version, each said with
    that version. The latter are pins for an isolated build (SageAttention's setuptools<75):
    pip install --no-build-isolation builds with what is installed, and so does prebuild."""
    other = {}
    for chain in unmet:
        version = installed_version(Requirement(chain[-1]).name)
        if version is not None:
            other[chain] = f"{chain[-1]} (installed: {version})"
    return unmet - set(other), sorted(set(other.values()))


def missing_requirements_message(
    missing: set[tuple[str, ...]], empty_submodules: Sequence[str] = ()
) -> str:
    """Pure: the error for build requirements not met here, each a chain from the project's
    requirement to the one unmet (``build.check_dependency``): the unmet ones are what to
    install, each named with what needs it where that is not the project itself. Its git
    submodules that are empty (``empty_submodules``) are said with it: the build that would
    show them missing cannot run before."""
    needed = sorted({chain[-1] for chain in missing})
    parents = sorted({f"{chain[-1]} for {chain[-2]}" for chain in missing if len(chain) > 1})
    return (
        f"the project's build needs {', '.join(needed)}, not installed here"
        + (f" ({'; '.join(parents)})" if parents else "")
        + ". prebuild builds without isolation (so that this torch is used): "
        f"pip install {' '.join(shlex.quote(n) for n in needed)}"
        + (
            f". Its git submodules {', '.join(empty_submodules)} are empty as well: should its "
            f"build need them, get them {SUBMODULES_FIX}"
            if empty_submodules
            else ""
        )
    )


def installed_version(name: str) -> str | None:
    """The version of distribution ``name`` installed in this environment, None if none is."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_pins_note(pins: list[str], torch_version: str) -> str:
    """Pure: the note for a build whose torch requirements the installed torch does not meet."""
    return (
        f"its build asks for {', '.join(pins)} (what pip would install in an isolated build): "
        f"built against the installed torch {torch_version} instead, the torch the wheel is "
        "for and pins"
    )
