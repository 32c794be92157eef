"""Whether a built wheel loads wherever its torch does: the glibc and libstdc++ versions its
libraries need against those torch's own libraries need.

torch's wheels are built in a manylinux_2_28 container (glibc 2.28, GCC's devtoolset), so they
need little of the machine. A wheel compiled on a newer machine (Debian 12: glibc 2.36, GCC 12)
links that machine's symbol versions (``__libc_single_threaded@GLIBC_2.32``,
``GLIBCXX_3.4.29``) and fails to load on an older one where torch runs fine, with the loader's
"version `GLIBCXX_3.4.29' not found". The build says so at once (``floor_note``); the wheel's
loader explains the failure where it happens (``runtime.c_runtimes.version_problem``).
"""

from __future__ import annotations

import functools
import zipfile
from pathlib import Path

from prebuild.runtime.c_runtimes import (
    CXXABI,
    GLIBC,
    GLIBCXX,
    Needs,
    beyond,
    combined,
    describe,
)
from prebuild.tool.builder.toolchain import Torch
from prebuild.tool.inspection import is_shared_library, runtime_needs

# torch's own libraries (libtorch_cpu.so, libc10_cuda.so, ...), whose needs are torch's floor.
TORCH_LIBRARIES = ("libtorch*.so", "libc10*.so")
# glibc's and libstdc++'s families: libgcc_s's versions go with them and are not said apart.
_SAID = (GLIBC, GLIBCXX, CXXABI)


def wheel_note(wheel: Path, torch: Torch) -> str | None:
    """The build's note where ``wheel`` needs a newer glibc or libstdc++ than ``torch`` (the
    torch it was built against) does; None where it loads wherever that torch does."""
    return floor_note(
        wheel_runtime(wheel),
        torch_runtime(torch.library_dir),
        torch.version_string,
    )


@functools.cache  # one torch per build, its libraries read once for every wheel
def torch_runtime(library_dir: Path) -> dict[str, str]:
    """What torch's libraries in ``library_dir`` need together (read, never loaded)."""
    needs = []
    for pattern in TORCH_LIBRARIES:
        for library in sorted(library_dir.glob(pattern)):
            with library.open("rb") as stream:
                needs.append(runtime_needs(stream))
    return combined(*needs)


def wheel_runtime(wheel: Path) -> dict[str, str]:
    """What a wheel's shared libraries need together."""
    with zipfile.ZipFile(wheel) as zf:
        return combined(
            *(runtime_needs(zf.read(n)) for n in sorted(zf.namelist()) if is_shared_library(n))
        )


def floor_note(wheel: Needs, torch: Needs, torch_version: str) -> str | None:
    """Pure: what to say where the wheel's libraries need a newer glibc or libstdc++ than
    torch's (``torch``: torch_runtime); None where they need no more than torch does, or
    torch's needs are unknown (no library of it was read)."""
    if not torch:
        return None
    ours = {f: v for f, v in beyond(wheel, torch).items() if f in _SAID}
    if not ours:
        return None
    theirs = {f: torch[f] for f in ours if f in torch}
    runtimes = " or ".join(
        name
        for name, families in (("glibc", {GLIBC}), ("libstdc++", {GLIBCXX, CXXABI}))
        if families & ours.keys()
    )
    return (
        f"it needs {describe(ours)}"
        + (f", where torch {torch_version} itself needs {describe(theirs)}" if theirs else "")
        + f": machines that run this torch with an older {runtimes} cannot load it (a "
        "manylinux_2_28 container, where torch's wheels are built, builds one that loads "
        "wherever torch does)"
    )
