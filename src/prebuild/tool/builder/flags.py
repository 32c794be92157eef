"""Pure build logic: what to compile for which archs, with which flags, named how.

No process is run and no file is read here, so every rule is unit-tested directly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from prebuild.runtime.arch import Arch, ArchError, parse_arch_list
from prebuild.tool.arch_support import ALL_ARCHS, torch_tag
from prebuild.tool.index_keys import CPU_TAG, HOST_TAG

# Archs built when PREBUILD_ARCHS is not set (a source install on a user's machine): the
# data-centre and consumer GPUs of Turing through Blackwell (prebuild.tool.arch_support, the table the
# CI matrix and the docs' support table come from), plus PTX of the newest one so that future GPUs can still
# run the kernels through the driver's JIT.
DEFAULT_ARCHS = ",".join(a.sm for a in ALL_ARCHS)
DEFAULT_PTX = True
# The compile cache's launcher, set by `prebuild wheel --cache` for the project's setup.py too.
LAUNCHER_ENV = "PREBUILD_COMPILER_LAUNCHER"
# The record of the libraries `prebuild wheel` compiled, which the project's setup.py packages
# without running the preflight or the compile again (compile.CompiledLibraries.write).
COMPILED_ENV = "PREBUILD_COMPILED"

# nvcc needs about this much memory per thread for our kernels (measured peak below 1 GiB;
# with headroom). Parallel nvcc jobs beyond free memory are how large builds die with OOM.
NVCC_MEMORY_PER_THREAD = 2 << 30


def torch_target_define(target: Version) -> str:
    """``-DTORCH_TARGET_VERSION=0x020d000000000000`` for 2.13 (major << 56 | minor << 48)."""
    value = (target.major << 56) | (target.minor << 48)
    return f"-DTORCH_TARGET_VERSION=0x{value:016x}"


# Python 3.10's limited API: the wheel is tagged cp310-abi3 (our libraries call no Python
# API at all; the define documents and enforces that).
PY_LIMITED_API_DEFINE = "-DPy_LIMITED_API=0x030A0000"


def ptx_archs_for(archs: tuple[Arch, ...], ptx: bool) -> tuple[Arch, ...]:
    """PTX is embedded for the newest requested arch only (its plain, portable form)."""
    if not ptx or not archs:
        return ()
    newest = max(archs)
    return (Arch(newest.major, newest.minor),)


def gencode_flags(sass: tuple[Arch, ...], ptx: tuple[Arch, ...]) -> list[str]:
    flags = [f"-gencode=arch={a.compute},code={a.sm}" for a in sass]
    flags += [f"-gencode=arch={a.compute},code={a.compute}" for a in ptx]
    return flags


def common_defines(torch_target: Version, package: str) -> list[str]:
    """The stable-ABI target, the limited API, and the package the library belongs to
    (``PREBUILD_PACKAGE``: prebuild's headers name it in their error messages)."""
    return [
        torch_target_define(torch_target),
        PY_LIMITED_API_DEFINE,
        f"-DPREBUILD_PACKAGE={package}",
    ]


def cxx_flags(include_dirs: tuple[Path, ...], torch_target: Version, package: str) -> list[str]:
    # -ffp-contract=off: no fused multiply-add where the source has a * b + c, so the
    # instruction-set copies of a CPU kernel (prebuild/cpu_isa.h; AVX-512 implies FMA) round
    # alike and give the same bits as the baseline one.
    return [
        "-std=c++17",
        "-O3",
        "-ffp-contract=off",
        "-fPIC",
        "-fvisibility=hidden",
        "-Wall",
        "-Wno-unknown-pragmas",
        *common_defines(torch_target, package),
        *(f"-I{d}" for d in include_dirs),
    ]


def compress_flags(compress: bool) -> list[str]:
    """Compressed fatbins are smaller (decompressed once, at module load); ``--no-compress``
    exists to measure what compression saves (scripts/bench.py)."""
    return ["--compress-mode=size"] if compress else ["--no-compress"]


# The first nvcc with --compress-mode (CUDA 12.8); older ones compress with their default.
COMPRESS_MODE_NVCC = Version("12.8")


def classic_compress_flags(compress: bool, nvcc: Version) -> list[str]:
    """Pure: the fatbin compression a classic project's nvcc calls get (compress_flags), where
    this nvcc has the option: layer_norm's objects are a tenth of nvcc 13.0's default size."""
    if compress and nvcc < COMPRESS_MODE_NVCC:
        return []
    return compress_flags(compress)


def nvcc_flags(
    include_dirs: tuple[Path, ...],
    sass: tuple[Arch, ...],
    ptx: tuple[Arch, ...],
    threads: int,
    compress: bool,
    torch_target: Version,
    package: str,
) -> list[str]:
    return [
        "-std=c++17",
        "-O3",
        "-lineinfo",
        f"--threads={threads}",
        *compress_flags(compress),
        "-Xcompiler=-fPIC",
        "-Xcompiler=-fvisibility=hidden",
        "--expt-relaxed-constexpr",
        *common_defines(torch_target, package),
        *(f"-I{d}" for d in include_dirs),
        *gencode_flags(sass, ptx),
    ]


def link_flags(library_dir: Path) -> list[str]:
    # Only libtorch_cpu: every stable-ABI shim symbol lives there. No rpath: torch is always
    # imported (and libtorch_cpu loaded) before our libraries, so the loader finds it by name.
    return ["-shared", f"-L{library_dir}", "-ltorch_cpu"]


def sanitizer_flags(sanitize: str) -> list[str]:
    """Compile and link flags for a sanitised build of the host libraries ("" for none)."""
    if not sanitize:
        return []
    # -O1: what the sanitizers recommend, and half the compile time of -O3 (the last -O wins).
    # PREBUILD_ONE_CPU_COPY: the CPU kernels' instruction-set copies compiled once
    # (prebuild/cpu_isa.h): unvectorised at -O1, the wider copies would check the same code.
    # -g1: line tables only, all a report's file:line needs; full -g cost 40 % more compile
    # time (sh_cpu.cpp: 10.4 s against 6.1 s of CPU, 2026-11-29).
    return [
        f"-fsanitize={sanitize}",
        "-DPREBUILD_ONE_CPU_COPY",
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
        "-g1",
        "-O1",
    ]


def nvcc_threads(n_gencodes: int, cpus: int) -> int:
    return max(1, min(n_gencodes, cpus))


def parallel_jobs(cpus: int, available_memory: int, memory_per_job: int) -> int:
    """Parallel compile jobs: at most one per core and no more than memory holds."""
    return max(1, min(cpus, available_memory // max(1, memory_per_job)))


def local_version_label(
    cuda: Version | None, sass: tuple[Arch, ...], ptx: tuple[Arch, ...], archs: bool = True
) -> str:
    """``cu130.sm80.sm90`` (plus ``.ptx90`` with PTX); ``cpu`` for a build without CUDA.
    ``archs=False``: ``cu130`` only (variant wheels: their archs are in the variant label)."""
    if cuda is None or not sass:
        return CPU_TAG
    parts = [cuda_tag(cuda)]
    if archs:
        parts += [a.tag for a in sass] + [f"ptx{a.number}" for a in ptx]
    return ".".join(parts)


def cuda_tag(cuda: Version) -> str:
    """``cu130`` for CUDA 13.0."""
    return f"cu{cuda.major}{cuda.minor}"


def classic_host_label(torch_version: str | None, cuda: Version | None) -> str:
    """``pt214.cu130.host`` (host code calling CUDA) or ``pt214.cpu`` (``cuda`` None: CPU code
    only): the label of a classic wheel with no GPU code, which serves every GPU.
    ``torch_version`` None: the label of one not tied to a torch (the stable ABI, or none),
    which names no torch: ``cu130.host``, ``cpu.host`` (not prebuild's own ``cpu``: that one
    has no index key)."""
    if torch_version is None:
        return f"{CPU_TAG if cuda is None else cuda_tag(cuda)}.{HOST_TAG}"
    tail = CPU_TAG if cuda is None else f"{cuda_tag(cuda)}.{HOST_TAG}"
    return f"{torch_tag(torch_version)}.{tail}"


def torch_pin(torch_version: str, stable_target: str | None = None) -> str:
    """``torch>=2.14,<2.15``: a classic (``torch/extension.h``) extension uses torch's C++ ABI,
    which holds within one minor release only; ``torch>=2.10`` for one whose libraries use only
    the stable ABI, targeting ``stable_target``."""
    if stable_target is not None:
        return f"torch>={stable_target}"
    v = Version(torch_version)
    return f"torch>={v.major}.{v.minor},<{v.major}.{v.minor + 1}"


def classic_local_label(
    torch_version: str | None,
    cuda: Version,
    sass: tuple[Arch, ...],
    ptx: tuple[Arch, ...],
    archs: bool = True,
) -> str:
    """``pt214.cu130.sm90``: what a classic project's wheel needs (``relabel.add_local_label``
    keeps the project's own label in front); ``archs=False``: ``pt214.cu130`` (variant wheels).
    ``torch_version`` None: a stable-ABI wheel's, which names no torch (``cu130.sm90``)."""
    label = local_version_label(cuda, sass, ptx, archs)
    return label if torch_version is None else f"{torch_tag(torch_version)}.{label}"


@dataclass(frozen=True)
class BuildOptions:
    """What one build compiles. Read from PREBUILD_* environment variables by setup.py, and
    set by ``prebuild wheel`` for each wheel it builds."""

    archs: tuple[Arch, ...]
    ptx: bool
    jobs: int | None = None  # None: from cores and free memory
    build_dir: Path | None = None  # None: <source>/build/prebuild
    simt: bool = False  # also build the simt test library (CUDA kernel bodies on the CPU)
    sanitize: str = ""  # e.g. "address,undefined": sanitise the host libraries
    compress: bool = True  # compressed fatbins (nvcc --compress-mode=size)
    archs_in_version: bool = (
        True  # False: +cu130 only (variant wheels carry the archs in their label)
    )
    launcher: Path | None = (
        None  # every compile runs as LAUNCHER COMPILER ARGS (the compile cache's)
    )
    compiled: Path | None = None  # prebuild wheel compiled the libraries already: their record

    @property
    def ptx_archs(self) -> tuple[Arch, ...]:
        return ptx_archs_for(self.archs, self.ptx)

    @property
    def cuda(self) -> bool:
        return bool(self.archs)

    def to_env(self) -> dict[str, str]:
        env = {
            "PREBUILD_ARCHS": ",".join(a.sm for a in self.archs),
            "PREBUILD_PTX": str(int(self.ptx)),
        }
        if self.jobs is not None:
            env["PREBUILD_JOBS"] = str(self.jobs)
        if self.build_dir is not None:
            env["PREBUILD_BUILD_DIR"] = str(self.build_dir)
        if self.simt:
            env["PREBUILD_SIMT"] = "1"
        if self.sanitize:
            env["PREBUILD_SANITIZE"] = self.sanitize
        if not self.compress:
            env["PREBUILD_COMPRESS"] = "0"
        if not self.archs_in_version:
            env["PREBUILD_ARCHS_IN_VERSION"] = "0"
        # The setup.py prebuild wheel runs uses prebuild wheel's compile cache, or none: never
        # one of its own (from a PREBUILD_CACHE in the environment).
        env[LAUNCHER_ENV] = str(self.launcher) if self.launcher is not None else ""
        env["PREBUILD_CACHE"] = "off"
        # Said always, so that only prebuild wheel's own record is ever packaged.
        env[COMPILED_ENV] = str(self.compiled) if self.compiled is not None else ""
        return env

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        default_archs: tuple[Arch, ...] | None = None,
        default_ptx: bool = DEFAULT_PTX,
    ) -> BuildOptions:
        """The options of a source build (setup.py); without PREBUILD_ARCHS, the project's
        ``default-archs`` (else the support table's) and ``default-ptx``."""
        env = os.environ if env is None else env
        archs_text = env.get("PREBUILD_ARCHS")
        if archs_text is None:
            archs = default_archs if default_archs is not None else parse_arch_list(DEFAULT_ARCHS)
        else:
            archs = parse_arch_list(archs_text)
        ptx_text = env.get("PREBUILD_PTX")
        ptx = (
            (default_ptx if archs_text is None else False)
            if ptx_text is None
            else _flag("PREBUILD_PTX", ptx_text)
        )
        simt = _flag("PREBUILD_SIMT", env.get("PREBUILD_SIMT", "0"))
        compress = _flag("PREBUILD_COMPRESS", env.get("PREBUILD_COMPRESS", "1"))
        archs_in_version = _flag(
            "PREBUILD_ARCHS_IN_VERSION", env.get("PREBUILD_ARCHS_IN_VERSION", "1")
        )
        sanitize = env.get("PREBUILD_SANITIZE", "").strip()
        if sanitize and not re.fullmatch(r"[a-z]+(,[a-z]+)*", sanitize):
            raise ValueError(
                f"PREBUILD_SANITIZE must look like 'address,undefined', got {sanitize!r}"
            )
        jobs_text = env.get("PREBUILD_JOBS")
        jobs = None
        if jobs_text:
            if not jobs_text.isdigit() or int(jobs_text) < 1:
                raise ValueError(f"PREBUILD_JOBS must be a positive integer, got {jobs_text!r}")
            jobs = int(jobs_text)
        build_dir = Path(env["PREBUILD_BUILD_DIR"]) if env.get("PREBUILD_BUILD_DIR") else None
        launcher = Path(env[LAUNCHER_ENV]) if env.get(LAUNCHER_ENV) else None
        compiled = Path(env[COMPILED_ENV]) if env.get(COMPILED_ENV) else None
        return cls(
            archs=archs,
            ptx=ptx,
            jobs=jobs,
            build_dir=build_dir,
            simt=simt,
            sanitize=sanitize,
            compress=compress,
            archs_in_version=archs_in_version,
            launcher=launcher,
            compiled=compiled,
        )


def _flag(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ArchError(f"{name} must be 0 or 1, got {text!r}")
