"""Where a project compiles at first use instead of at install time: its calls of
torch.utils.cpp_extension's ``load``, ``load_inline`` or private ``_jit_compile`` (as gsplat calls
it), through the module or imported by name. ``prebuild wheel`` names them when a project's
wheel holds no library; ``prebuild doctor`` finds the installed packages that will compile.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

# The import may span lines: "from torch.utils.cpp_extension import (\n _jit_compile,\n)".
JIT_NAMES = r"(?:load|load_inline|_jit_compile)"
JIT_QUALIFIED = re.compile(rf"cpp_extension\.{JIT_NAMES}\s*\(")
JIT_IMPORT = re.compile(
    rf"from\s+torch\.utils\.cpp_extension\s+import\s+\(?[\w\s,]*\b{JIT_NAMES}\b"
)
JIT_BARE = re.compile(rf"(?<![.\w]){JIT_NAMES}\s*\(")


def first_jit_call(text: str) -> int | None:
    """Pure: the line number of the first JIT compile call in a Python file's text."""
    if "cpp_extension" not in text:
        return None
    bare = JIT_IMPORT.search(text) is not None
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if JIT_QUALIFIED.search(code) or (
            bare and JIT_BARE.search(code) and not code.lstrip().startswith("def ")
        ):
            return number
    return None


def jit_sites_in(
    files: Iterable[Path],
    root: Path | None,
    limit: int = 3,
    read: Callable[[Path], str] | None = None,
) -> list[str]:
    """``file:line`` of the first JIT call in each of ``files`` that has one, at most
    ``limit``; files named relative to ``root`` (as given when None), read by ``read``."""
    found = []
    for path in sorted(files):
        try:
            text = read(path) if read else path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        number = first_jit_call(text)
        if number is not None:
            found.append(f"{path.relative_to(root) if root else path}:{number}")
            if len(found) == limit:
                break
    return found


# Where a build puts copies of a project's files (setuptools' build/lib, eggs): not its sources.
BUILD_OUTPUTS = ("build", "dist", ".eggs")


def jit_sites(source: Path, limit: int = 3) -> list[str]:
    """The JIT calls of a project's source tree (jit_sites_in over its Python files, the
    copies its build made left out)."""
    files = (
        p
        for p in source.rglob("*.py")
        if p.relative_to(source).parts[0] not in BUILD_OUTPUTS
        and not any(part.endswith(".egg-info") for part in p.relative_to(source).parts)
    )
    return jit_sites_in(files, source, limit)


def site_module(site: str) -> str:
    """Pure: the module a JIT site (``file:line``) lies in: ``knn_cuda/__init__.py:26`` ->
    ``knn_cuda``; a ``src/`` layout's folder is no part of the name."""
    parts = site.rsplit(":", 1)[0].removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    if parts and parts[0] == "src":
        parts.pop(0)
    return ".".join(parts)


_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w\s,()]+)|import\s+([\w.\s,]+))")


def setup_imports_jit(setup_text: str, sites: list[str]) -> tuple[int, str] | None:
    """Pure: the first line of a setup.py that imports a module compiling when imported (one of
    ``sites``' modules, or a package or submodule of one, as ``from knn_cuda import
    __version__`` runs ``knn_cuda/__init__.py``), with its code; None if none does. Such a
    build runs that compile itself, into its copy of the project."""
    jit = {site_module(site) for site in sites}
    for number, line in enumerate(setup_text.splitlines(), 1):
        m = _IMPORT.match(line.split("#", 1)[0])
        if not m:
            continue
        if m[1]:  # from X import a, b: X, and X.a, X.b where they are submodules
            names = [m[1], *(f"{m[1]}.{n}" for n in re.findall(r"\w+", m[2]))]
        else:
            names = [n.split(" as ")[0].strip() for n in m[3].split(",")]
        # importing a.b.c runs a, a.b and a.b.c
        runs = {".".join(n.split(".")[: i + 1]) for n in names for i in range(n.count(".") + 1)}
        if runs & jit:
            return number, line.strip()
    return None
