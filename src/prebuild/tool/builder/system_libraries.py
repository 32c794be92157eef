"""The system libraries a classic wheel's libraries link: what a machine installing the wheel
must have besides torch, its CUDA packages and the C and C++ runtimes.

torch-sparse-solve 0.0.5 links the build machine's SuiteSparse (``libklu.so.2``), DeepSpeed's
async_io ``libaio.so.1``: on a machine without them the wheel's import fails with the dynamic
loader's "cannot open shared object file". The build says which at once (a note), the manifest
records them (``system_libraries``), and the wheel's guard names the library when the
loader's failure to open it is the import's (runtime/classic_guard.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# What every Linux machine that runs torch has: glibc's libraries, the loader, the GCC runtimes
# (manylinux's own assumption), and the NVIDIA driver's libraries (a GPU machine's; the wheel's
# fit check says what a GPU needs).
BASE = re.compile(
    r"(?:libc|libm|libdl|librt|libpthread|libresolv|libutil|libnsl|libcrypt|libmvec)\.so\.\d+"
    r"|ld-linux[\w.-]*\.so\.\d+|libstdc\+\+\.so\.6|libgcc_s\.so\.1"
    r"|libcuda\.so\.1|libnvidia-ml\.so\.1"
)


def system_links(needed: Mapping[str, tuple[str, ...]], provided: Iterable[str]) -> list[str]:
    """Pure: the libraries that the wheel's libraries (file -> its DT_NEEDED) link and that
    nothing installed with it provides: not the wheel's own files, not ``provided`` (the file
    names of torch's libraries and its CUDA packages'), not BASE. In the order first met."""
    own = {os.path.basename(file) for file in needed}
    known = own | set(provided)
    return list(
        dict.fromkeys(
            name
            for names in needed.values()
            for name in names
            if name not in known and not BASE.fullmatch(name)
        )
    )


def torch_provided(torch_library_dir: Path, nvidia_lib_dirs: Iterable[Path]) -> set[str]:
    """The file names of the libraries torch brings: its own ``lib`` and those of the
    ``nvidia`` packages it depends on (cuda_shim.nvidia_dirs("lib"))."""
    folders = [torch_library_dir, *nvidia_lib_dirs]
    return {p.name for folder in folders if folder.is_dir() for p in folder.iterdir()}


# Where the dynamic loader finds a system library on common distributions.
LIBRARY_DIRS = (
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/local/lib",
    "/usr/lib",
    "/lib",
)


def found_at(name: str, environ: Mapping[str, str]) -> str | None:
    """Where this machine has the library ``name`` (LD_LIBRARY_PATH's folders first, then the
    usual ones); None where none holds it."""
    extra = [d for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for folder in (*extra, *LIBRARY_DIRS):
        path = Path(folder) / name
        if path.exists():
            return str(path)
    return None


def system_libraries_note(found: Mapping[str, str | None]) -> str:
    """Pure: what the user should know of the system libraries the wheel links (name -> where
    the build machine has it)."""
    said = ", ".join(f"{name} ({where})" if where else name for name, where in found.items())
    return (
        f"its libraries link {said}, which neither the wheel, torch nor the C and C++ runtimes "
        "provide: a machine installing the wheel needs them too (its import says which is "
        "missing)"
    )
