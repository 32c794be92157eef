"""The built wheel's libraries loaded beside torch before the wheel is written, in a child
process (as ``import`` loads them: ``RTLD_NOW``, torch's libraries loaded first), so that a
library needing a name nobody defines is found here, not on every machine the wheel goes to.

The torch names a library needs are checked against torch's exports before this
(torch_abi.missing_torch_names); this finds the rest: a function the project declares and no
source it compiles defines (a source its setup.py leaves out, or compiles only under a condition),
a library's name the system's copy lacks. Only ``undefined symbol`` counts: a library that cannot
find a library it needs (the driver's ``libcuda.so.1`` on a machine without a GPU) or whose
static initialisers fail here is not judged.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Container
from pathlib import Path

from prebuild.tool.inspection import is_shared_library

# argv: the libraries' paths. One line per library, as it is tried (a crash names the next).
LOAD_SCRIPT = """
import ctypes, sys
import torch
print("ready", flush=True)
for path in sys.argv[1:]:
    try:
        ctypes.CDLL(path)  # ctypes adds RTLD_NOW: every name resolved, as import does
    except OSError as exc:
        print("failed", path, " ".join(str(exc).split()), sep="\\t", flush=True)
    else:
        print("loaded", path, sep="\\t", flush=True)
"""

_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
TIMEOUT_S = 120


def undefined_names(failures: dict[str, str], defined_in_wheel: Container[str]) -> dict[str, str]:
    """Pure: each library (``failures``: its name in the wheel -> the loader's error) that
    failed on an undefined name the wheel's own libraries do not define either (one the project
    loads itself first would be found), with that name."""
    found = {}
    for library, error in failures.items():
        if (m := _UNDEFINED.search(error)) and m[1] not in defined_in_wheel:
            found[library] = m[1]
    return found


def parse_load_lines(stdout: str) -> tuple[bool, dict[str, str], set[str]]:
    """Pure: LOAD_SCRIPT's output -> (whether torch imported, path -> error of each library
    that failed, the paths tried)."""
    failures, tried = {}, set()
    lines = stdout.splitlines()
    for line in lines:
        fields = line.split("\t")
        if fields[0] == "loaded" and len(fields) == 2:
            tried.add(fields[1])
        elif fields[0] == "failed" and len(fields) == 3:
            tried.add(fields[1])
            failures[fields[1]] = fields[2]
    return bool(lines) and lines[0] == "ready", failures, tried


def load_failures(wheel: Path, python: str = sys.executable) -> dict[str, str]:
    """Each shared library of ``wheel`` that fails to load beside torch in a child ``python``
    (name in the wheel -> the loader's error). The libraries are unpacked in their folders
    (a bundled library found by ``$ORIGIN``); a child that crashes on one (a static initialiser)
    goes on in another from the next; none tried where the child cannot start."""
    with tempfile.TemporaryDirectory(prefix="prebuild-load-") as tmp, zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if is_shared_library(n)]
        for name in names:
            zf.extract(name, tmp)
        by_path = {str(Path(tmp, name)): name for name in names}
        left, failures = list(by_path), {}
        while left:
            try:
                proc = subprocess.run(
                    [python, "-c", LOAD_SCRIPT, *left],
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT_S,
                    cwd=tmp,
                )
            except subprocess.TimeoutExpired:
                break
            ready, failed, tried = parse_load_lines(proc.stdout)
            failures.update({by_path[p]: e for p, e in failed.items()})
            if not ready:  # torch did not import: nothing to judge
                break
            # a child that ended early crashed on the first library it did not report
            left = [p for p in left if p not in tried][1:] if proc.returncode else []
        return failures
