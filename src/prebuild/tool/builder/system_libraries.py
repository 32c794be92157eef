"""The system libraries a classic wheel's libraries link: what a machine installing the wheel
must have besides torch, its CUDA packages and the C and C++ runtimes.

torch-sparse-solve 0.0.5 links the build machine's SuiteSparse (``libklu.so.2``), DeepSpeed's
async_io ``libaio.so.1``: on a machine without them the wheel's import fails with the dynamic
loader's "cannot open shared object file". The build copies them into the wheel (bundle.py,
by auditwheel, as cibuildwheel's repair step does), but for the machine's own (MACHINE_BOUND),
which must come from the machine the wheel runs on. What stays the system's is said at once (a
note), recorded in the manifest (``system_libraries``), and named by the wheel's guard when the
loader's failure to open it is the import's (runtime/classic_guard.py).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# What every Linux machine that runs torch has: glibc's libraries, the loader, the GCC runtimes
# (manylinux's own assumption), and the NVIDIA driver's libraries (a GPU machine's; the wheel's
# fit check says what a GPU needs). Globs, as auditwheel's --exclude takes them.
BASE = (
    *(
        f"{lib}.so.*"
        for lib in (
            "libc", "libm", "libdl", "librt", "libpthread", "libresolv", "libutil", "libnsl",
            "libcrypt", "libmvec",
        )
    ),
    "ld-linux*.so.*",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libcuda.so.1",
    "libnvidia-ml.so.1",
)  # fmt: skip

# Libraries a wheel must take from the machine it runs on, never from the build machine: MPI and
# the RDMA stack (they match the cluster's fabric and launcher), and the graphics and driver
# libraries (they match the GPU driver: nvdiffrast's EGL).
MACHINE_BOUND = (
    "libmpi*.so*",
    "libopen-rte.so*",
    "libopen-pal.so*",
    "libibverbs.so*",
    "librdmacm.so*",
    "libmlx*.so*",
    "libucp.so*",
    "libucs.so*",
    "libnvidia-*.so*",
    "libEGL*.so*",
    "libGL*.so*",
    "libOpenGL.so*",
    "libvulkan.so*",
    "libX11.so*",
    "libxcb*.so*",
)


def matches(name: str, globs: Iterable[str]) -> bool:
    """Pure: whether the library file name ``name`` matches one of ``globs``."""
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


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
            if name not in known and not matches(name, BASE)
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


def bundle_exclusions(provided: Iterable[str], own: Iterable[str]) -> list[str]:
    """Pure: auditwheel's ``--exclude`` globs for a wheel whose system libraries are copied in:
    what torch brings (``provided``), the wheel's own files, BASE and MACHINE_BOUND. Applied to
    what those libraries link in turn too (libklu.so.2's libamd.so.3 is copied, its libc not)."""
    return [*sorted({*provided, *own}), *BASE, *MACHINE_BOUND]


# auditwheel names a library it copies after its file with a hash of its contents:
# libklu.so.2 -> libklu-8e4bd090.so.2.
_COPIED = re.compile(r"(?P<base>[^./]+)-[0-9a-f]{8}\.(?P<ext>so(?:\..+)?)")


def copied_soname(file_name: str) -> str:
    """Pure: the name a library auditwheel copied had on the build machine
    (``libklu-8e4bd090.so.2`` -> ``libklu.so.2``); other names as they are."""
    match = _COPIED.fullmatch(file_name)
    return f"{match['base']}.{match['ext']}" if match else file_name


def kept_reason(kept: Iterable[str], bundle: bool, failure: str = "") -> str:
    """Pure: why the system libraries ``kept`` are not in the wheel: ``bundle`` False
    (--no-bundle), bundling's ``failure``, or what was copied left them to the machine."""
    if not bundle:
        return "--no-bundle"
    if failure:
        return failure
    if all(matches(name, MACHINE_BOUND) for name in kept):
        return "the machine's own (MPI, RDMA, graphics and driver libraries)"
    return "the machine's own, as manylinux's policy has them (auditwheel leaves them out)"


def system_libraries_note(found: Mapping[str, str | None], why: str = "") -> str:
    """Pure: what the user should know of the system libraries the wheel links and does not
    hold (name -> where the build machine has it); ``why``: why they were not copied in."""
    return (
        f"its libraries link {_with_places(found)}, which neither the wheel, torch nor the C and C++ runtimes "
        "provide: a machine installing the wheel needs them too (its import says which is "
        f"missing){f'; not copied into the wheel: {why}' if why else ''}"
    )


def bundled_note(copied: Mapping[str, str | None], folder: str, size: int) -> str:
    """Pure: what the user should know of the system libraries copied into the wheel (name ->
    where the build machine had it), into ``folder``, ``size`` bytes in all."""
    return (
        f"copied the system libraries its libraries link into the wheel ({folder}/, "
        f"{size / 1024:.0f} KiB): {_with_places(copied)}. A machine installing it needs none of "
        "them; --no-bundle leaves them out"
    )


def _with_places(found: Mapping[str, str | None]) -> str:
    """Pure: "libklu.so.1 (/lib/x86_64-linux-gnu/libklu.so.1.3.8), libx.so"."""
    return ", ".join(f"{name} ({where})" if where else name for name, where in found.items())
