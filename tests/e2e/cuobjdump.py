"""cuobjdump (PyPI's nvidia-cuda-cuobjdump, a test dependency): an independent reader of
the archs inside a library, to cross-check prebuild's own fatbin reader against."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from prebuild.runtime.arch import parse_arch
from prebuild.tool.builder.toolchain import find_cuda_tool
from prebuild.tool.fatbin import EmbeddedCode

# "ELF file    2: ssim_cuda.sm_80.cubin" / "PTX file    1: ssim_cuda.sm_90.ptx"
_ENTRY_RE = re.compile(
    r"^(ELF|PTX) file\s+\d+:\s+(?P<name>\S+?)\.(?P<arch>sm_\d+[af]?)\.(cubin|ptx)\s*$"
)


def parse_listing(elf_listing: str, ptx_listing: str, library_name: str) -> EmbeddedCode:
    """cuobjdump names code from linked libraries (no source name) after the library file
    (``_C_cuda.abi3.1.sm_75.cubin``): those are ``linked_sass``."""
    sass, ptx, linked = set(), set(), set()
    for text, kind in ((elf_listing, "ELF"), (ptx_listing, "PTX")):
        for line in text.splitlines():
            m = _ENTRY_RE.match(line.strip())
            if not m or m[1] != kind:
                continue
            arch = parse_arch(m["arch"])
            if kind == "PTX":
                ptx.add(arch)
            elif m["name"].startswith(library_name.split(".")[0] + "."):
                linked.add(arch)
            else:
                sass.add(arch)
    return EmbeddedCode(tuple(sorted(sass)), tuple(sorted(ptx)), tuple(sorted(linked)))


def cuobjdump_code(library: Path) -> EmbeddedCode:
    tool = find_cuda_tool("cuobjdump")
    assert tool is not None, "nvidia-cuda-cuobjdump is a test dependency (scripts/bootstrap.sh)"

    def listing(flag: str) -> str:
        proc = subprocess.run([str(tool), flag, str(library)], capture_output=True, text=True)
        # cuobjdump exits non-zero when a library simply has no PTX (or no ELF, or no
        # device code) at all.
        benign = ("No " in proc.stderr) or "does not contain device code" in proc.stderr
        assert proc.returncode == 0 or benign, proc.stderr
        return proc.stdout

    return parse_listing(listing("--list-elf"), listing("--list-ptx"), library.name)
