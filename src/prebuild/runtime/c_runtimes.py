"""The C and C++ runtimes (glibc, libstdc++) a compiled library needs, read from the symbol
versions it references (``GLIBC_2.32``, ``GLIBCXX_3.4.29``): pure functions over those names.

A library compiled on a machine links the symbol versions of that machine's glibc and GCC; it
then loads only where both are at least as new. torch's own wheels are built in a manylinux_2_28
container, so a wheel built on a newer machine can need more than the torch it runs with. The
build says so (``tool.builder.runtime_floor``), ``prebuild inspect`` shows what a wheel needs,
and the loaders turn the dynamic loader's ``version `GLIBCXX_3.4.29' not found`` into what to do
(``version_problem``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

# The symbol-version families of the runtimes every Linux machine has: glibc's (libc, libm, the
# loader), libstdc++'s two and libgcc_s's. Others (a project's own, OpenMP's) are not runtimes.
GLIBC, GLIBCXX, CXXABI, GCC = "GLIBC", "GLIBCXX", "CXXABI", "GCC"
FAMILIES = (GLIBC, GLIBCXX, CXXABI, GCC)
_NAME = re.compile(r"^(GLIBCXX|CXXABI|GLIBC|GCC)_(\d+(?:\.\d+)*)$")

# The first GCC release whose libstdc++ defines each GLIBCXX version (libstdc++'s manual, "ABI
# Policy and Guidelines"): named so a version means something to whoever reads it.
_GCC_OF_GLIBCXX = {
    "3.4.19": "4.8.3",
    "3.4.20": "4.9",
    "3.4.21": "5",
    "3.4.22": "6",
    "3.4.23": "7",
    "3.4.24": "7.2",
    "3.4.25": "8",
    "3.4.26": "9",
    "3.4.27": "9.2",
    "3.4.28": "9.3",
    "3.4.29": "11",
    "3.4.30": "12",
    "3.4.31": "13",
    "3.4.32": "13.2",
    "3.4.33": "14",
    "3.4.34": "15",
}

Needs = Mapping[str, str]  # family -> the newest version referenced: {"GLIBC": "2.32"}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def newest(names: Iterable[str]) -> dict[str, str]:
    """Pure: the newest version of each runtime family among symbol-version names
    (``["GLIBC_2.2.5", "GLIBC_2.32", "GLIBCXX_3.4.29"]`` -> ``{"GLIBC": "2.32", "GLIBCXX":
    "3.4.29"}``); names of other families are left out."""
    found: dict[str, str] = {}
    for name in names:
        match = _NAME.match(name)
        if match is None:
            continue
        family, version = match[1], match[2]
        if family not in found or _key(version) > _key(found[family]):
            found[family] = version
    return {f: found[f] for f in FAMILIES if f in found}


def combined(*needs: Needs) -> dict[str, str]:
    """Pure: what libraries need together (the newest of each family)."""
    return newest(f"{family}_{version}" for n in needs for family, version in n.items())


def beyond(needs: Needs, floor: Needs) -> dict[str, str]:
    """Pure: the families in which ``needs`` asks for a newer version than ``floor`` (a family
    ``floor`` does not name at all counts as beyond it)."""
    return {
        family: version
        for family, version in needs.items()
        if family not in floor or _key(version) > _key(floor[family])
    }


def gcc_of(glibcxx: str) -> str | None:
    """Pure: the first GCC whose libstdc++ has ``GLIBCXX_<glibcxx>`` (None for one not listed)."""
    return _GCC_OF_GLIBCXX.get(glibcxx)


def describe(needs: Needs) -> str:
    """Pure: ``glibc 2.32 and GLIBCXX_3.4.29 (the libstdc++ of GCC 11)`` for messages: glibc and
    libstdc++ (CXXABI where GLIBCXX is not named); libgcc_s goes with the compiler, left out."""
    parts = []
    if GLIBC in needs:
        parts.append(f"glibc {needs[GLIBC]}")
    if GLIBCXX in needs:
        gcc = gcc_of(needs[GLIBCXX])
        parts.append(
            f"GLIBCXX_{needs[GLIBCXX]}" + (f" (the libstdc++ of GCC {gcc})" if gcc else "")
        )
    elif CXXABI in needs:
        parts.append(f"CXXABI_{needs[CXXABI]} (libstdc++)")
    return " and ".join(parts)


def machine_glibc() -> str | None:
    """This machine's glibc version ("2.36"), None where it is not glibc (musl) or unknown."""
    try:
        said = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        return None
    if not said or not said.startswith("glibc "):
        return None
    return said.split()[1]


OLDER_RUNTIME = "older than the one of the machine that built the wheel"

# glibc's loader, where a library needs a symbol version the loaded one lacks:
# "/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by .../_C.so)"
_VERSION_NOT_FOUND = re.compile(
    r"(?P<library>\S+): version `(?P<version>(?P<kind>GLIBCXX|CXXABI|GLIBC)_[\w.]+)' not found"
)


def version_problem(message: str, build_command: str, glibc: str | None = None) -> str | None:
    """Pure: what to say where the dynamic loader's ``message`` says the C library (glibc) or
    the C++ runtime (libstdc++) it loaded lacks a symbol version the wheel's libraries need:
    the wheel was built on a machine with a newer one; None for any other message.
    ``glibc``: this machine's version (``machine_glibc``), named where known."""
    match = _VERSION_NOT_FOUND.search(message)
    if match is None:
        return None
    library, version = match["library"], match["version"]
    if match["kind"] == GLIBC:
        have = f"glibc {glibc}, " if glibc else ""
        return (
            f"its libraries need {version} of the C library, and this machine's ({have}{library}) "
            f"is {OLDER_RUNTIME}. Build the wheel on this machine, or on one whose glibc is no "
            f"newer than this one's (a manylinux_2_28 container, as torch's own wheels are "
            f"built): {build_command}."
        )
    gcc = gcc_of(version.split("_", 1)[1]) if match["kind"] == GLIBCXX else None
    made = f" (GCC {gcc}'s or newer)" if gcc else ""
    return (
        f"its libraries need {version} of the C++ runtime{made}, and the libstdc++ loaded here "
        f"({library}) is {OLDER_RUNTIME} (a conda environment's often is). Put a newer one "
        "first (conda: conda install -c conda-forge libstdcxx-ng; or LD_PRELOAD the "
        f"system's libstdc++.so.6), or build the wheel on this machine: {build_command}."
    )
