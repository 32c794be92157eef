"""Whether libraries load, tried in short-lived child processes so that ``prebuild doctor``'s own
process stays free of them (and of a CUDA context): prebuild's own op libraries, another project's
extension modules, and a native project's libraries through the loader its wheel carries.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from prebuild.runtime.manifest import Manifest
from prebuild.tool.installed import InstalledProject

LOAD_SCRIPT = "from prebuild.ops import *; print('loaded')"  # every library and op family
# Another project's extension modules, after torch (whose libraries they need loaded first).
IMPORT_SCRIPT = "import importlib, sys, torch\nfor m in sys.argv[1:]: importlib.import_module(m)\nprint('loaded')"
# A native project's libraries, through the loader its wheel carries (argv: package, directory).
NATIVE_LOAD_SCRIPT = (
    "import importlib, sys, torch\n"
    "importlib.import_module(sys.argv[1] + '._prebuild_runtime').load_package(sys.argv[2])\n"
    "print('loaded')"
)


def load_check(script: str = LOAD_SCRIPT, args: tuple[str, ...] = (), timeout: float = 300) -> str:
    """Load libraries in a short-lived child (this process stays free of them): "" when
    they load, else the child's last error line."""
    if not isinstance(script, str) or not all(isinstance(a, str) for a in args):
        raise TypeError("load_check takes a script and a tuple of string arguments")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"loading took more than {timeout:.0f} s"
    if proc.returncode == 0 and proc.stdout.strip().endswith("loaded"):
        return ""
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"


def load_project(project: InstalledProject) -> InstalledProject:
    """The project with its ``load_error`` found out: a native project's libraries loaded by
    its own loader, another project's extension modules imported after torch. An altered
    install, or one without extension modules, is not loaded (its ``load_error`` stays None)."""
    if not isinstance(project, InstalledProject):
        raise TypeError(f"load_project takes an InstalledProject, got {type(project).__name__}")
    m = project.manifest
    if m is None or project.problem:
        return project
    if isinstance(m, Manifest):
        if project.package_dir is None:
            return project
        error = load_check(NATIVE_LOAD_SCRIPT, (m.package, str(project.package_dir)))
    elif project.modules:
        error = load_check(IMPORT_SCRIPT, project.modules)
    else:
        return project
    return dataclasses.replace(project, load_error=error)
