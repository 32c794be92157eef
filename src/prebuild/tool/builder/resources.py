"""What each compiled kernel uses, as ptxas reported it: registers, spills, stack and shared
memory per kernel and arch.

Every nvcc compile of a native project runs with ``--resource-usage`` and keeps ptxas's report
beside its object (``obj/NAME.o.ptxas``, written by the compile rule in ``compile.py``, so a
compile cache's replay or an object already up to date still has one); ``read_objects`` turns
them into ``resources.json`` in the CUDA build directory. A kernel that spills registers to
local memory is slower than it was written to be: ``prebuild wheel`` names every such kernel.
A kernel compiled with ``__launch_bounds__`` gets at most the registers the bounds allow, and
what does not fit spills: no spills means every kernel fits its bounds.

``parse_ptxas`` is pure (text in, rows out), unit-tested on ptxas's own wording.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

REPORT_SUFFIX = ".ptxas"  # beside each object: ptxas's report of its compile
REPORT_NAME = "resources.json"

_ENTRY = re.compile(
    r"ptxas info\s*: Compiling entry function '(?P<kernel>[^']+)' for '(?P<arch>sm_\w+)'"
)
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
    r"(?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"ptxas info\s*: Used (?P<registers>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


@dataclass(frozen=True)
class KernelResources:
    kernel: str  # the mangled name, as ptxas gives it
    arch: str  # "sm_90"
    registers: int
    shared_bytes: int  # static shared memory
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


def parse_ptxas(text: str) -> list[KernelResources]:
    """The kernels of one ptxas report (nvcc --resource-usage), in its order. A kernel's lines
    follow its "Compiling entry function" line; device functions (no entry line) are skipped."""
    rows, current, frame = [], None, None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current, frame = (m["kernel"], m["arch"]), None
        elif current and (m := _FRAME.search(line)):
            frame = m
        elif current and (m := _USED.search(line)):
            smem = _SMEM.search(line)
            rows.append(
                KernelResources(
                    kernel=current[0],
                    arch=current[1],
                    registers=int(m["registers"]),
                    shared_bytes=int(smem["smem"]) if smem else 0,
                    stack_bytes=int(frame["stack"]) if frame else 0,
                    spill_store_bytes=int(frame["stores"]) if frame else 0,
                    spill_load_bytes=int(frame["loads"]) if frame else 0,
                )
            )
            current = None
    return rows


def short_name(kernel: str) -> str:
    """A readable name for a mangled one: the last name of its nested name, with an integer
    template argument when it has one (``rasterize_backward_kernel<16>``). Enough to tell our
    kernels apart in a message; not a demangler (anything else is returned as it is)."""
    if not kernel.startswith("_Z"):
        return kernel
    i = 3 if kernel.startswith("_ZN") else 2
    name = None
    while i < len(kernel) and kernel[i].isdigit():  # <length><identifier>, one after another
        j = i
        while kernel[j].isdigit():
            j += 1
        n = int(kernel[i:j])
        name, i = kernel[j : j + n], j + n
    if name is None:
        return kernel
    template = re.match(r"ILi(\d+)E", kernel[i:])
    return f"{name}<{template[1]}>" if template else name


def read_objects(objects: list[Path]) -> list[KernelResources]:
    """Every kernel of these objects' reports (an object without one contributes nothing)."""
    rows = []
    for obj in objects:
        report = obj.with_name(obj.name + REPORT_SUFFIX)
        if report.is_file():
            rows += parse_ptxas(report.read_text(encoding="utf-8", errors="replace"))
    return rows


def write_report(rows: list[KernelResources], path: Path) -> Path:
    path.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n", encoding="utf-8")
    return path


def read_report(path: Path) -> list[KernelResources]:
    return [KernelResources(**r) for r in json.loads(path.read_text(encoding="utf-8"))]


def spill_warning(rows: list[KernelResources]) -> str | None:
    """One line naming the kernels that spill (None when none does)."""
    spilling = sorted(
        {(short_name(r.kernel), r.arch, r.spill_store_bytes) for r in rows if r.spills}
    )
    if not spilling:
        return None
    return "kernels that spill registers to local memory (slower than written): " + ", ".join(
        f"{name} [{arch}, {stores} B]" for name, arch, stores in spilling
    )
