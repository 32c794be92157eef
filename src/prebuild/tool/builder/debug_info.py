"""Debug information stripped from a classic wheel's libraries.

setuptools compiles a project's C++ files with Python's own CFLAGS, whose ``-g`` (pyenv's,
Debian's) makes most of a library's bytes debug sections no user of the wheel reads:
GeoTransformer's 19.9 MB library is 0.27 MB without them, llm-awq's 18.9 MB 2.7 MB.
The build's host compiler shim leaves it out (``-g0`` after it: a third of the compile time
of a file including torch's headers), and ``strip --strip-debug`` removes what is still there
(nvcc's, a library's own build): only those sections go, the symbol table (a backtrace still
names functions), the code and the fatbin stay. ``prebuild wheel --no-strip`` keeps them.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from prebuild.tool.builder.relabel import rewrite_wheel
from prebuild.tool.inspection import is_shared_library


def debug_bytes(data: bytes) -> int:
    """Pure: the bytes of an ELF file's debug sections (``.debug_*``, ``.zdebug_*``); 0 for a
    file that is not ELF."""
    try:
        sections = ELFFile(io.BytesIO(data)).iter_sections()
        return sum(s["sh_size"] for s in sections if s.name.startswith((".debug_", ".zdebug_")))
    except ELFError:
        return 0


@dataclass(frozen=True)
class Stripped:
    """What stripping made of a wheel: the wheel to go on with (the one given where nothing was
    stripped), the libraries' bytes before and after, and why nothing was where it could not
    be ("" otherwise)."""

    wheel: Path
    before: int = 0
    after: int = 0
    skipped: str = ""
    # host compiles that asked for it and were given -g0 (the build's shim: nvcc_shim)
    left_out: int = 0

    def note(self) -> str:
        """What the wheel's summary says; "" where there was nothing to strip or leave out."""
        if self.skipped:
            return f"its libraries keep their debug information: {self.skipped}"
        said = []
        if self.left_out:
            calls = "compile" if self.left_out == 1 else "compiles"
            said.append(
                # their -g is Python's own (setuptools passes its flags) or the project's
                f"left out of {self.left_out} {calls} asking for it (-g0 after a C++ compile's "
                "-g, nvcc's -g dropped), a third less compile time"
            )
        if self.before != self.after:
            said.append(f"stripped from its libraries ({_mb(self.before)} -> {_mb(self.after)})")
        if not said:
            return ""
        return (
            f"debug information {' and '.join(said)}: symbols and code are as built, "
            "--no-strip keeps it"
        )


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def strip_wheel(wheel: Path, out_dir: Path) -> Stripped:
    """``wheel``, its shared libraries with debug sections stripped (``strip --strip-debug``),
    written into ``out_dir``; the wheel itself where none has any."""
    with zipfile.ZipFile(wheel) as zf:
        with_debug = [n for n in zf.namelist() if is_shared_library(n) and debug_bytes(zf.read(n))]
    if not with_debug:
        return Stripped(wheel)
    tool = shutil.which("strip")
    if tool is None:
        return Stripped(wheel, skipped="no `strip` (binutils) on PATH")
    sizes: list[tuple[int, int]] = []

    def strip(root: Path) -> None:
        for name in with_debug:
            path = root / name
            before = path.stat().st_size
            subprocess.run([tool, "--strip-debug", str(path)], check=True, capture_output=True)
            sizes.append((before, path.stat().st_size))

    try:
        stripped = rewrite_wheel(wheel, out_dir, edit=strip)
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        return Stripped(wheel, skipped=f"strip failed ({why[-1] if why else exc.returncode})")
    return Stripped(stripped, sum(b for b, _ in sizes), sum(a for _, a in sizes))
