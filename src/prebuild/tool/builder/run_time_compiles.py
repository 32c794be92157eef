"""A built wheel's libraries that compile GPU code themselves when they run, outside torch's
``cpp_extension`` (which the wheel's guard sees): with NVRTC, in the process (tutel, curobo's
kernels), or by running nvcc (tutel's first choice: ``$CUDA_HOME/bin/nvcc`` by ``execl``, which
a machine without the CUDA toolkit does not have). prebuild cannot make those compiles ahead of
time; the summary says they happen, so that "the runtime never compiles" is not promised of a
wheel that does. Pure functions over what the libraries link, call and hold; one reader.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from prebuild.tool.inspection import dynamic_symbols, is_shared_library, needed_libraries

# The C library's ways to run another program.
_RUNS_PROGRAMS = frozenset(
    {"execl", "execlp", "execle", "execv", "execvp", "execvpe", "execve", "posix_spawn",
     "posix_spawnp", "system", "popen"}
)  # fmt: skip
_NVRTC = re.compile(r"libnvrtc\.so\b")
# A switch a library reads that names NVRTC (tutel's USE_NVRTC): what may choose it.
_NVRTC_SWITCH = re.compile(rb"\b[A-Z][A-Z0-9_]*NVRTC[A-Z0-9_]*\b")


@dataclass(frozen=True)
class RunTimeCompile:
    """How one library compiles GPU code when it runs."""

    library: str  # its name in the wheel
    nvrtc: str | None  # the NVRTC library it links (libnvrtc.so.13)
    nvcc: str | None  # the call by which it runs a program naming nvcc (execl), or None
    switches: tuple[str, ...]  # the NVRTC switches it names (USE_NVRTC)


def run_time_compile(
    library: str, needed: tuple[str, ...], undefined: frozenset[str], data: bytes
) -> RunTimeCompile | None:
    """Pure: how ``library`` (the libraries it links, the names it needs, its bytes) compiles
    GPU code when it runs: linking NVRTC, or running a program while naming nvcc; None where
    it does neither."""
    nvrtc = next((n for n in needed if _NVRTC.match(n)), None)
    runs = sorted(undefined & _RUNS_PROGRAMS)
    nvcc = runs[0] if runs and b"nvcc" in data else None
    if nvrtc is None and nvcc is None:
        return None
    switches = tuple(sorted({m.decode() for m in _NVRTC_SWITCH.findall(data)}))
    return RunTimeCompile(library, nvrtc, nvcc, switches)


def run_time_compiles(wheel: Path) -> list[RunTimeCompile]:
    """The wheel's libraries that compile GPU code when they run (run_time_compile), by name."""
    found = []
    with zipfile.ZipFile(wheel) as zf:
        for name in sorted(n for n in zf.namelist() if is_shared_library(n)):
            data = zf.read(name)
            compiles = run_time_compile(
                name, needed_libraries(data), dynamic_symbols(data)[1], data
            )
            if compiles is not None:
                found.append(compiles)
    return found


def run_time_note(compiles: list[RunTimeCompile]) -> str:
    """Pure: what the summary says of the libraries that compile when they run."""
    parts = []
    for c in compiles:
        how = []
        if c.nvcc:
            how.append(
                f"runs nvcc itself (it names nvcc and calls {c.nvcc}), which needs the CUDA "
                "toolkit on every machine that runs it"
            )
        if c.nvrtc:
            how.append(f"links NVRTC ({c.nvrtc}: compiles in the process, no toolkit needed)")
        switch = f"; it reads {', '.join(c.switches)}, which may choose NVRTC" if c.switches else ""
        parts.append(f"{c.library} {', and '.join(how)}{switch}")
    return (
        "its libraries compile GPU code themselves when they run, on each machine and outside "
        f"torch.utils.cpp_extension, which the wheel's guard does not see: {'; '.join(parts)}. "
        "Those compiles cannot be made ahead of time: the wheel holds what its build compiled"
    )
