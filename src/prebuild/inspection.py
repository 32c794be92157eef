"""What a compiled CUDA library really contains, read with ``cuobjdump``.

The manifest says which archs a wheel was built for; this module reads the binary itself
(``cuobjdump --list-elf`` / ``--list-ptx``), so the build can prove the two agree.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from prebuild.arch import Arch, parse_arch
from prebuild.build.toolchain import find_cuda_tool

CUOBJDUMP_HELP = (
    "cuobjdump was not found (CUDA_HOME/bin, PATH, /usr/local/cuda/bin or PyPI's "
    "nvidia-cuda-cuobjdump): pip install nvidia-cuda-cuobjdump"
)

# "ELF file    2: ssim_cuda.sm_80.cubin" / "PTX file    1: ssim_cuda.sm_90.ptx"
_ENTRY_RE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+(?P<name>\S+?)\.(?P<arch>sm_\d+[af]?)\.(cubin|ptx)\s*$")


@dataclass(frozen=True)
class EmbeddedCode:
    """Archs with code in a library. ``sass``/``ptx`` are our kernels'; ``linked_sass`` is
    code that came with statically linked libraries (the CUDA runtime embeds a few kernels
    of its own), named by cuobjdump after the library file rather than a source file."""

    sass: tuple[Arch, ...]
    ptx: tuple[Arch, ...]
    linked_sass: tuple[Arch, ...] = ()


def parse_listing(elf_listing: str, ptx_listing: str, library_name: str) -> EmbeddedCode:
    """Pure: turn cuobjdump's two listings into archs (see EmbeddedCode)."""
    sass, ptx, linked = set(), set(), set()
    for text, kind in ((elf_listing, "ELF"), (ptx_listing, "PTX")):
        for line in text.splitlines():
            m = _ENTRY_RE.match(line.strip())
            if not m or m[1] != kind:
                continue
            arch = parse_arch(m["arch"])
            from_linked_library = m["name"].startswith(library_name.split(".")[0] + ".")
            if kind == "PTX":
                ptx.add(arch)
            elif from_linked_library:
                linked.add(arch)
            else:
                sass.add(arch)
    return EmbeddedCode(tuple(sorted(sass)), tuple(sorted(ptx)), tuple(sorted(linked)))


def find_cuobjdump() -> Path | None:
    return find_cuda_tool("cuobjdump")


def embedded_code(library: Path, cuobjdump: Path) -> EmbeddedCode:
    def listing(flag: str) -> str:
        proc = subprocess.run([str(cuobjdump), flag, str(library)], capture_output=True, text=True)
        # cuobjdump exits non-zero when a library simply has no PTX (or no ELF) at all.
        if proc.returncode != 0 and "No " not in proc.stderr:
            raise RuntimeError(f"cuobjdump {flag} {library} failed: {proc.stderr.strip()}")
        return proc.stdout

    return parse_listing(listing("--list-elf"), listing("--list-ptx"), library.name)
