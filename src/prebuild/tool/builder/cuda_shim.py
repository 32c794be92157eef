"""The shim CUDA toolkit a classic project's build sees as ``CUDA_HOME``.

Its ``bin/nvcc`` is a script running ``prebuild.tool.builder.nvcc_shim`` (exactly the requested
archs, whatever setup.py asks; every call logged), its other tools are the real toolkit's, and
its ``include/`` and ``lib64/`` are the real toolkit's (where nvcc itself says they are, see
``CudaToolkit``) plus what torch's CUDA packages add: a minimal toolkit has no
``libcudart.so``, and ``ATen/cuda/CUDAContext.h`` needs ``cublas_v2.h``.

``probe_toolkit`` is the preflight: before the project is touched, the host compiler compiles
what most extensions' C++ files include (``cuda_runtime.h``, ``c10/cuda/CUDAGuard.h``) through
the shim toolkit, which both proves the toolkit whole and finds the C++ standard torch's
headers need (torch 2.14's need C++20).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from prebuild.tool.builder import processes
from prebuild.tool.builder.nvcc_shim import (
    SHIM_ENV_COMPRESS,
    SHIM_ENV_CXX11_ABI,
    SHIM_ENV_DEVICE_LINK,
    SHIM_ENV_GENCODE,
    SHIM_ENV_LAUNCHER,
    SHIM_ENV_LOG,
    SHIM_ENV_MIN_STD,
    SHIM_ENV_NO_DEBUG,
    SHIM_ENV_REAL,
)
from prebuild.tool.builder.toolchain import (
    CudaToolkit,
    HostCompiler,
    ToolchainError,
    Torch,
    compile_launcher,
)

# The standards a probe tries, oldest first (nvcc 12 and 13 accept these two and older ones).
PROBE_STANDARDS = ("c++17", "c++20")
PROBE_CACHE_FORMAT = 1  # raised when what a kept answer means changes
PROBE_SOURCE = """// prebuild's preflight: what a classic extension's C++ files include.
#include <cuda_runtime.h>
#include <c10/cuda/CUDAGuard.h>
int main() { return 0; }
"""


def nvidia_dirs(kind: str) -> list[Path]:
    """``include`` or ``lib`` directories of the nvidia-* packages torch installs
    (``site-packages/nvidia/cu13/lib``; CUDA 12 packages: ``nvidia/cuda_runtime/lib``, ...)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [
        d
        for root in spec.submodule_search_locations
        for d in sorted(Path(root).glob(f"*/{kind}"))
        if d.is_dir()
    ]


def _link_entries(dest: Path, sources: list[Path], skip: set[str] = frozenset()) -> None:
    """Symlink every entry of each source directory into ``dest``; the first source wins."""
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if not source.is_dir():
            continue
        for entry in sorted(source.iterdir()):
            target = dest / entry.name
            if entry.name not in skip and not target.exists() and not target.is_symlink():
                target.symlink_to(entry)


def unversioned_names(names: list[str]) -> dict[str, str]:
    """Pure: the unversioned name each versioned shared library lacks, and the newest version
    it stands for: ``libcublas.so.13`` -> ``libcublas.so`` (``-lcublas`` links only that)."""
    newest: dict[str, tuple[tuple[int, ...], str]] = {}
    for name in names:
        stem, sep, version = name.partition(".so.")
        parts = version.split(".")
        if not sep or not stem.startswith("lib") or not all(p.isdigit() for p in parts):
            continue
        key = tuple(int(p) for p in parts)
        if stem + ".so" not in names and (stem not in newest or key > newest[stem][0]):
            newest[stem] = (key, name)
    return {f"{stem}.so": name for stem, (_, name) in sorted(newest.items())}


def _link_unversioned(lib64: Path) -> None:
    """Give every versioned library of ``lib64`` its unversioned name: the CUDA packages torch
    installs (and PyPI's toolkit) have ``libcublas.so.13`` only, and a project linking
    ``-lcublas`` (or ``-lcudart``) finds nothing else."""
    for plain, versioned in unversioned_names(sorted(p.name for p in lib64.iterdir())).items():
        (lib64 / plain).symlink_to((lib64 / versioned).resolve())


# Where the shim toolkit keeps the toolkit its device links run in (``device_link_toolkit``).
DEVICE_LINK_TOOLKIT = "device-link-toolkit"


def libnvvm_for_nvlink(toolkit: CudaToolkit, candidates: list[Path]) -> Path | None:
    """The libnvvm nvlink should load, where it would not find it itself; None where it would
    (or where there is none to give it). nvlink's link-time optimisation (``-dlto``, which torch
    adds to the device link of every ``dlink=True`` extension) loads
    ``<its own folder>/../nvvm/lib64/libnvvm.so`` and nothing else: PyPI's CUDA 13 packages put
    the library in ``lib/`` ("nvlink fatal: elfLink linker library load error")."""
    if (toolkit.bin_dir.parent / "nvvm" / "lib64" / "libnvvm.so").exists():
        return None
    for folder in candidates:
        found = sorted(folder.glob("libnvvm.so*")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


def device_link_toolkit(toolkit: CudaToolkit, dest: Path, libnvvm: Path) -> Path:
    """A copy of the toolkit made of links, with ``nvvm/lib64/libnvvm.so`` where nvlink looks
    for it; its ``bin/nvcc`` (the real nvcc: nvcc and the tools it runs find their toolkit from
    the folder they are called in). Returns that nvcc."""
    root = toolkit.bin_dir.parent
    _link_entries(dest, [root], skip={"bin", "nvvm"})
    _link_entries(dest / "bin", [toolkit.bin_dir])
    _link_entries(dest / "nvvm", [root / "nvvm"], skip={"lib64"})
    _link_entries(dest / "nvvm" / "lib64", [root / "nvvm" / "lib64"])
    (dest / "nvvm" / "lib64" / "libnvvm.so").symlink_to(libnvvm.resolve())
    return dest / "bin" / "nvcc"


def make_cuda_shim(toolkit: CudaToolkit, dest: Path) -> Path:
    """Lay out the shim toolkit at ``dest`` (replacing an older one); returns it, the build's
    CUDA_HOME. Its ``bin/nvcc`` is written per wheel by ``write_nvcc_script``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    _link_entries(dest / "bin", [toolkit.bin_dir], skip={"nvcc"})
    _link_entries(dest / "include", [*toolkit.include_dirs, *nvidia_dirs("include")])
    lib64 = dest / "lib64"
    _link_entries(lib64, [*toolkit.library_dirs, *nvidia_dirs("lib")])
    _link_unversioned(lib64)
    _link_entries(lib64 / "stubs", list(toolkit.stub_dirs))
    _link_entries(dest, [toolkit.root], skip={"bin", "include", "lib64", "lib"})
    # lib64 holds the toolkit's libraries and the nvidia packages' by now
    libnvvm = libnvvm_for_nvlink(toolkit, [lib64, toolkit.root / "lib"])
    if libnvvm is not None:
        device_link_toolkit(toolkit, dest / DEVICE_LINK_TOOLKIT, libnvvm)
    return dest


def search_paths(shim: Path, environ: dict[str, str]) -> dict[str, str]:
    """Pure: ``CPATH`` and ``LIBRARY_PATH`` for a build through the shim toolkit: the user's,
    then the shim's ``include`` and ``lib64``. A setuptools build is told the shim's folders
    (CUDA_HOME), but CMake's CUDA support asks nvcc where its toolkit is and gets the real one:
    a toolkit of nvcc alone lacks cuBLAS's and the other libraries' headers, which the shim has
    from torch's nvidia-* packages (bitsandbytes includes cublasLt.h). The compilers search
    these folders after every ``-I``, so a project's own headers and the toolkit's come first."""
    own = {"CPATH": shim / "include", "LIBRARY_PATH": shim / "lib64"}
    return {
        name: ":".join(p for p in (environ.get(name, ""), str(folder)) if p)
        for name, folder in own.items()
    }


def driver_api_names(preprocessed: str) -> list[str]:
    """Pure: the driver API's functions in ``cuda.h`` as the preprocessor leaves it, sorted:
    the names libcuda.so exports (its macros applied: ``cuMemAlloc`` is ``cuMemAlloc_v2``)."""
    return sorted(set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", preprocessed)))


def driver_stub_source(names: list[str]) -> str:
    """Pure: a C++ file defining each of ``names`` as a C function that does nothing: linked
    against, never run (at run time the driver's libcuda.so.1 takes its place)."""
    return 'extern "C" {\n' + "".join(f"void {name}() {{}}\n" for name in names) + "}\n"


def add_driver_stub(shim: Path, cxx: HostCompiler) -> Path | None:
    """``lib64/libcuda.so`` of the shim toolkit, for a project that links ``-lcuda`` (the Hopper
    kernels of FlashAttention 3 and SageAttention call the driver's cuTensorMapEncodeTiled) on
    a machine without a driver; None if it could not be made (such a link fails as before).

    It is the toolkit's own stub where it has one (``lib64/stubs``), else one made here as
    NVIDIA's is: every function of the toolkit's ``cuda.h`` (with and without the per-thread
    default stream), soname ``libcuda.so.1``. A library linked against it needs the driver's
    ``libcuda.so.1`` at run time, as it would if built on a GPU machine."""
    stubs, lib64 = shim / "lib64" / "stubs", shim / "lib64"
    stub = stubs / "libcuda.so"
    if not stub.exists():
        header = shim / "include" / "cuda.h"
        if not header.is_file():
            return None
        preprocess = [*cxx.command, "-E", "-P", "-x", "c++", f"-I{shim / 'include'}", str(header)]
        names: set[str] = set()
        for defines in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1"]):
            done = processes.run([*preprocess, *defines], capture_output=True, text=True)
            if done.returncode != 0:
                return None
            names.update(driver_api_names(done.stdout))
        source = shim / "prebuild-libcuda-stub.cpp"
        source.write_text(driver_stub_source(sorted(names)))
        stubs.mkdir(parents=True, exist_ok=True)
        link = [*cxx.command, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub)]
        if processes.run([*link, str(source)], capture_output=True).returncode != 0:
            return None
    if not (lib64 / "libcuda.so").exists():
        (lib64 / "libcuda.so").symlink_to(stub.resolve())
    return lib64 / "libcuda.so"


def _write_shim_script(script: Path, settings: dict[str, str]) -> Path:
    """``script``: ``python -m prebuild.tool.builder.nvcc_shim`` with ``settings`` (nvcc_shim's
    environment) exported."""
    # The shim module is found even if the project's build changes the environment.
    settings = {**settings, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    script.parent.mkdir(exist_ok=True)
    script.unlink(missing_ok=True)
    script.write_text(
        f'#!/bin/sh\n{exports} exec {shlex.quote(sys.executable)} -m prebuild.tool.builder.nvcc_shim "$@"\n'
    )
    script.chmod(0o755)
    return script


def write_nvcc_script(
    shim: Path,
    nvcc: Path,
    gencode: list[str],
    log: Path,
    min_std: str | None,
    launcher: Path | None = None,
    compression: Sequence[str] = (),
    cxx11_abi: str = "",
    no_debug: bool = False,
) -> Path:
    """``shim/bin/nvcc``: the nvcc shim with these settings, calling ``nvcc`` (the one the user
    reaches, wrapper or not), through ``launcher`` (the compile cache's) when given, with
    ``compression`` (flags.classic_compress_flags) added to each call; with ``no_debug``, a
    compile's -g (its host code's debug information) is dropped."""
    linker = shim / DEVICE_LINK_TOOLKIT / "bin" / "nvcc"
    settings = {
        SHIM_ENV_REAL: shlex.join([str(nvcc)]),
        SHIM_ENV_GENCODE: json.dumps(gencode),
        SHIM_ENV_COMPRESS: json.dumps(list(compression)),
        SHIM_ENV_LOG: str(log),
        SHIM_ENV_MIN_STD: min_std or "",
        SHIM_ENV_CXX11_ABI: cxx11_abi,
        SHIM_ENV_LAUNCHER: shlex.join([str(launcher)]) if launcher else "",
        SHIM_ENV_DEVICE_LINK: shlex.join([str(linker)]) if linker.exists() else "",
        SHIM_ENV_NO_DEBUG: "1" if no_debug else "",
    }
    return _write_shim_script(shim / "bin" / "nvcc", settings)


def write_cxx_script(
    shim: Path,
    cxx: HostCompiler,
    log: Path,
    min_std: str | None,
    launcher: Path | None = None,
    cxx11_abi: str = "",
    no_debug: bool = False,
) -> Path:
    """``shim/host-bin/c++``, the build's ``CXX`` (torch's BuildExtension compiles every C++ file
    with ``$CXX``): the host compiler ``cxx`` through the same shim, without a gencode list (its
    standard raised as nvcc's, every call logged), through ``launcher`` when given (the compile
    cache's), else through the user's own (``$CXX="ccache g++"``); with ``no_debug``, a compile
    asking for debug information gets -g0 (the wheel is stripped of it). Programs are resolved
    on the PATH of now: the build's puts the shim toolkit first."""
    real = [shutil.which(cxx.command[0]) or cxx.command[0], *cxx.command[1:]]
    through = [shutil.which(w) or w for w in compile_launcher(launcher, cxx.launcher)]
    settings = {
        SHIM_ENV_REAL: shlex.join(real),
        SHIM_ENV_LOG: str(log),
        SHIM_ENV_MIN_STD: min_std or "",
        SHIM_ENV_CXX11_ABI: cxx11_abi,
        SHIM_ENV_LAUNCHER: shlex.join(through),
        SHIM_ENV_NO_DEBUG: "1" if no_debug else "",
    }
    return _write_shim_script(shim / "host-bin" / "c++", settings)


def _compiler_message(output: str, limit: int = 2000) -> str:
    """The first error of a compiler's output, with the include chain before it."""
    start = output.find("In file included from")
    error = re.search(r"(fatal )?error:", output)
    if error is None:
        return output[-limit:].strip()
    begin = start if 0 <= start < error.start() else max(0, output.rfind("\n", 0, error.start()))
    return output[begin : begin + limit].strip()


def probe_inputs(shim: Path, torch: Torch, cxx: HostCompiler, environ: Mapping[str, str]) -> dict:
    """Everything the probe's answer depends on, as plain data: the compiler (its command and
    the program it runs, as installed), torch (version, headers), every header folder the shim
    toolkit holds and where it leads, the search-path variables the compiler reads, and the
    probe itself. Changing any of these asks again."""

    def installed(path: Path | None) -> list:
        try:
            st = path.stat() if path else None
        except OSError:
            st = None
        return [str(path), st.st_size, st.st_mtime_ns] if st else [str(path), None, None]

    program = shutil.which(cxx.command[0], path=environ.get("PATH"))
    include = shim / "include"
    entries = sorted(include.iterdir()) if include.is_dir() else []
    guard = [d / "c10" / "cuda" / "CUDAGuard.h" for d in torch.include_dirs]
    return {
        "format": PROBE_CACHE_FORMAT,
        "probe": [PROBE_SOURCE, *PROBE_STANDARDS],
        "cxx": [*cxx.command, *installed(Path(program).resolve() if program else None)],
        "torch": [torch.version_string, *map(str, torch.include_dirs)],
        "headers": [installed(p) for p in (*guard, (include / "cuda_runtime.h").resolve())],
        "shim": [[e.name, str(e.resolve())] for e in entries],
        "env": {k: environ.get(k, "") for k in ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")},
    }


def probe_key(inputs: dict) -> str:
    """Pure: the name of the probe's answer for these inputs (``probe_inputs``)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]


def read_probe_answer(path: Path) -> str | None:
    """The standard a probe of the same inputs found earlier; None where none is kept (or the
    file does not read as one)."""
    try:
        standard = json.loads(path.read_text()).get("standard")
    except (OSError, ValueError, AttributeError):
        return None
    return standard if standard in PROBE_STANDARDS else None


def keep_probe_answer(path: Path, standard: str, inputs: dict) -> None:
    """Written whole (a temporary file renamed) or not at all: a cache that cannot be written
    (a read-only home) only means the next build probes again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"standard": standard, "inputs": inputs}, f)
        os.replace(name, path)
    except BaseException as exc:  # a full disk, or Ctrl-C: no half-written file left behind
        with contextlib.suppress(OSError):
            os.unlink(name)
        if not isinstance(exc, OSError):
            raise


def probe_toolkit(
    shim: Path, torch: Torch, cxx: HostCompiler, toolkit: CudaToolkit, cache: Path | None = None
) -> str:
    """The oldest C++ standard in which the host compiler compiles ``PROBE_SOURCE`` against
    this torch through the shim toolkit; ToolchainError, with the compiler's words, if none does.
    ``cache``: a folder where the answer is kept per toolchain (``probe_inputs``), so that the
    next build with the same one does not compile the probe again (seconds of CPU); a failure
    is never kept."""
    inputs = probe_inputs(shim, torch, cxx, os.environ) if cache else {}
    kept = cache / f"{probe_key(inputs)}.json" if cache else None
    if kept and (standard := read_probe_answer(kept)):
        return standard
    standard = _probe(shim, torch, cxx, toolkit)
    if kept:
        keep_probe_answer(kept, standard, inputs)
    return standard


def _probe(shim: Path, torch: Torch, cxx: HostCompiler, toolkit: CudaToolkit) -> str:
    probe = shim / "prebuild-probe.cpp"
    probe.write_text(PROBE_SOURCE)
    includes = [
        f"-I{d}"
        for d in (
            *torch.include_dirs,
            *(d / "torch" / "csrc" / "api" / "include" for d in torch.include_dirs),
            shim / "include",
        )
    ]
    commands = {
        std: [*cxx.command, f"-std={std}", "-fsyntax-only", *includes, str(probe)]
        for std in PROBE_STANDARDS
    }
    # Started together: a second or so each, and the oldest that passes wins.
    procs: dict[str, subprocess.Popen] = {}
    try:
        for std, cmd in commands.items():
            procs[std] = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        results = {std: (proc.communicate()[0], proc.returncode) for std, proc in procs.items()}
    except BaseException:
        for proc in procs.values():
            processes.stop_tree(proc.pid)
        raise
    for std in PROBE_STANDARDS:
        if results[std][1] == 0:
            return std
    newest = PROBE_STANDARDS[-1]
    raise ToolchainError(
        f"the CUDA toolkit prepared for the build does not compile a file that includes cuda_runtime.h "
        f"and c10/cuda/CUDAGuard.h (as most extensions' C++ files do) with "
        f"{shlex.join(cxx.command)} -std={newest}. nvcc reports its "
        f"toolkit at {toolkit.root} (headers: {', '.join(map(str, toolkit.include_dirs)) or 'none'}); set CUDA_HOME "
        f"to a complete CUDA toolkit of torch's CUDA version ({torch.cuda}). The compiler said:\n"
        f"{_compiler_message(results[newest][0])}"
    )
