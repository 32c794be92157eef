"""The shared libraries a built wheel holds, read back from it: the archs of their GPU code
(checked against the request), the libraries and symbols they need (the CUDA libraries they
link, whether they use Python's C API)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from prebuild.runtime.arch import Arch
from prebuild.runtime.manifest import CPU_CODE, CUDA_HOST_CODE, BuiltLibrary
from prebuild.tool.builder.compile import BuildError
from prebuild.tool.builder.python_tag import any_python_tag, python_suffixed, uses_python_api
from prebuild.tool.inspection import (
    InspectionError,
    built_library,
    dynamic_symbols,
    found_library,
    is_shared_library,
    needed_libraries,
)


def distribution_name(wheel: Path) -> str:
    """The distribution a built wheel is of, as its file name says."""
    return str(parse_wheel_filename(wheel.name)[0])


# What a library links to call CUDA from the host: the driver, the runtime and its libraries,
# torch's CUDA parts.
_CUDA_LINKS = re.compile(
    r"lib(?:cuda|cudart|nvrtc|cublas\w*|cufft\w*|curand|cusolver\w*|cusparse\w*|nccl"
    r"|torch_cuda|c10_cuda)\.so\b"
)


def cuda_links(needed: dict[str, tuple[str, ...]]) -> list[str]:
    """Pure: the CUDA libraries that any of the libraries (file -> its DT_NEEDED) link, in the
    order first met."""
    return list(
        dict.fromkeys(n for names in needed.values() for n in names if _CUDA_LINKS.match(n))
    )


def host_code(links: list[str]) -> str:
    """Pure: what a wheel with no GPU code holds, by the CUDA libraries it links: CUDA host code
    (torch_memory_saver: the driver's memory API) or CPU code (torch-sparse-solve)."""
    return CUDA_HOST_CODE if links else CPU_CODE


def wheel_needed_libraries(wheel: Path) -> dict[str, tuple[str, ...]]:
    """Each shared library of the wheel, and the libraries it names as needed."""
    with zipfile.ZipFile(wheel) as zf:
        return {
            name: needed_libraries(zf.read(name))
            for name in sorted(zf.namelist())
            if is_shared_library(name)
        }


def wheel_symbols(wheel: Path) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Each shared library of the wheel, the symbols it defines, and those it needs from outside
    the wheel (those another of its libraries defines left out)."""
    with zipfile.ZipFile(wheel) as zf:
        symbols = {
            name: dynamic_symbols(zf.read(name))
            for name in sorted(zf.namelist())
            if is_shared_library(name)
        }
    own = frozenset().union(*(defined for defined, _ in symbols.values()))
    return {name: (defined, undefined - own) for name, (defined, undefined) in symbols.items()}


def any_python_retag(
    wheel: Path, tag: str, symbols: dict[str, tuple[frozenset[str], frozenset[str]]]
) -> str | None:
    """The tag for every Python of a wheel (``tag`` as built) whose libraries (``symbols``:
    wheel_symbols') use nothing of Python's and are named for none, as such projects' own
    wheels are tagged (bitsandbytes' py3-none); None where it keeps its own."""
    if python_suffixed(symbols):
        return None
    undefined = {name: needs for name, (_, needs) in symbols.items()}
    defined = {name: defines for name, (defines, _) in symbols.items()}
    if uses_python_api(undefined, defined, wheel_needed_libraries(wheel)):
        return None
    return any_python_tag(tag)


def read_wheel_libraries(wheel: Path) -> tuple[BuiltLibrary, ...]:
    """Every shared library in the wheel with its sha256, size and the archs inside it."""
    found = []
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(n for n in zf.namelist() if is_shared_library(n)):
            try:
                found.append(built_library(found_library(name, zf.read(name))))
            except InspectionError as exc:
                raise BuildError(f"{wheel.name}: {exc}") from exc
    return tuple(found)


def check_archs(
    wheel_name: str,
    libraries: tuple[BuiltLibrary, ...],
    sass: tuple[Arch, ...],
    ptx: tuple[Arch, ...],
    device_linked: bool = False,
) -> None:
    """Every library with GPU code holds exactly the requested SASS and PTX, and one has some;
    ``device_linked``: the build ran a device link (is_device_linked), which keeps no PTX."""
    with_code = [lib for lib in libraries if lib.has_code]
    wrong = [
        lib
        for lib in with_code
        if as_asked(lib.sass, sass) != tuple(sorted(sass)) or lib.ptx != tuple(sorted(ptx))
    ]
    if not with_code or wrong:
        held = (
            "; ".join(
                f"{lib.file}: SASS {', '.join(a.sm for a in lib.sass) or 'none'}, "
                f"PTX {', '.join(a.compute for a in lib.ptx) or 'none'}"
                for lib in libraries
            )
            or "no shared library at all"
        )
        only_ptx_lost = all(
            as_asked(lib.sass, sass) == tuple(sorted(sass)) and not lib.ptx for lib in with_code
        )
        why = (
            " Its device code is relocatable and device-linked (nvcc -dlink: dlink=True or "
            "-rdc=true in its setup.py), and a device link keeps the SASS of each arch, never "
            "PTX: build its wheels without PTX (no --ptx; per-arch wheels, not --variants, whose "
            "plain wheel carries it)."
            if device_linked and ptx and with_code and only_ptx_lost
            else ""
        )
        raise BuildError(
            f"{wheel_name} does not hold the archs asked for (SASS {', '.join(a.sm for a in sass)}, PTX "
            f"{', '.join(a.compute for a in ptx) or 'none'}): {held}.{why} No wheel was written."
        )


def as_asked(found: tuple[Arch, ...], asked: tuple[Arch, ...]) -> tuple[Arch, ...]:
    """Pure: the SASS archs a library holds, each arch-specific one (sm_90a) counted as the arch
    asked for (sm_90) where the project compiled its code in that variant (nvcc_shim's
    ``keep_specific``; the manifest records the variant, ``recorded_sass``); sorted, without
    repeats."""

    def counted(arch: Arch) -> Arch:
        plain = Arch(*arch.capability)
        return plain if arch.suffix and plain in asked else arch

    return tuple(sorted({counted(a) for a in found}))


def recorded_sass(libraries: tuple[BuiltLibrary, ...], asked: tuple[Arch, ...]) -> tuple[Arch, ...]:
    """Pure: the SASS archs a wheel's manifest records, which its guard holds every GPU to: each
    arch asked for, or its specific variant where a library holds that variant alone (sm_90a:
    compute capability 9.0 only, where sm_90 would also run on a later 9.x)."""
    recorded = []
    for arch in sorted(asked):
        alone = sorted(
            v
            for lib in libraries
            if lib.has_code and arch not in lib.sass
            for v in lib.sass
            if v.suffix and v.capability == arch.capability
        )
        recorded.append(alone[0] if alone else arch)
    return tuple(recorded)
