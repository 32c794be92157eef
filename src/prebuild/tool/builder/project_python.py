"""The project's own Python that its wheel leaves out.

A setup.py that lists ``ext_modules`` and no ``packages`` gets none (setuptools looks for
packages by itself only where nothing is listed), and ``find_packages()`` skips a folder without
``__init__.py``: raytracing's wheel holds its extension and not ``raytracing/``, BEVDepth's its
two extensions and none of ``bevdepth/``. The wheel builds and installs; ``import raytracing``
fails on the user's machine. And a setup.py built in place inside a larger package (CenterPoint's
``det3d/ops/iou3d_nms``: ``build_ext --inplace``) names its extension ``iou3d_nms_cuda``, which
its code imports from the package (``from . import iou3d_nms_cuda``): the wheel installs it at
the top level, where that import does not look. What the project's own ``pip wheel`` would do
too, so it is said, not changed. Pure functions over file names and sources.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import PurePosixPath

# Top-level folders of Python that are not what a user imports.
NOT_PACKAGES = frozenset(
    {"test", "tests", "doc", "docs", "example", "examples", "script", "scripts", "tools",
     "benchmark", "benchmarks", "bench", "configs", "demo", "demos", "build", "dist"}
)  # fmt: skip


def left_out_packages(
    project_files: list[str], wheel_files: list[str], empty: frozenset[str] = frozenset()
) -> list[str]:
    """Pure: the project's top-level folders of Python (``project_files``: its files, relative
    paths) of which the wheel (``wheel_files``: its names) holds no Python file, where the
    folder is a package (``__init__.py``) or the wheel holds other files of it (BEVDepth's
    extensions under ``bevdepth/ops/``); sorted. Only a setup.py's: another backend's wheel
    holds what its configuration names (scikit-build-core's ``wheel.packages``: xlstm's
    ``experiments/`` is scripts, left out as meant). A folder whose Python the wheel holds
    under another name is shipped (``package_dir={"pointops": "functions"}``, Pointcept's),
    and one whose Python files are all ``empty`` (a bare ``src/__init__.py`` beside C++
    sources) holds no code to leave out."""
    if "setup.py" not in project_files:
        return []
    python = _python_by_folder(project_files)
    wheel_python = _python_by_folder(wheel_files)  # its folders holding Python: shipped
    in_wheel = {PurePosixPath(n).parts[0] for n in wheel_files if "/" in n}

    def renamed(folder: str) -> bool:  # by its modules: every package has an __init__.py
        modules = python[folder] - {"__init__.py"}
        return bool(modules) and any(modules <= held for held in wheel_python.values())

    def code(folder: str) -> bool:
        return any(f"{folder}/{f}" not in empty for f in python[folder])

    return sorted(
        folder
        for folder in python.keys() - wheel_python.keys() - NOT_PACKAGES
        if ("__init__.py" in python[folder] or folder in in_wheel)
        and code(folder)
        and not renamed(folder)
    )


def _python_by_folder(files: list[str]) -> dict[str, set[str]]:
    """Pure: each top-level folder (not a hidden one) of ``files`` holding Python, with its
    Python files' paths inside it."""
    python: dict[str, set[str]] = {}
    for f in files:
        parts = PurePosixPath(f).parts
        if len(parts) > 1 and parts[-1].endswith(".py") and not parts[0].startswith("."):
            python.setdefault(parts[0], set()).add("/".join(parts[1:]))
    return python


def left_out_note(folders: list[str]) -> str:
    """Pure: what the wheel's summary says of ``folders`` (left_out_packages)."""
    named = ", ".join(f"{f}/" for f in folders)
    return (
        f"the wheel holds none of the project's Python in {named}: its setup.py names no such "
        "package (with ext_modules listed, setuptools finds none by itself; find_packages() "
        "skips a folder without __init__.py), so importing it fails where the wheel is "
        "installed. The project's own pip wheel leaves it out too: its setup.py needs "
        "packages=find_packages() (or the package named)"
    )


def top_level_extensions(wheel_files: list[str]) -> frozenset[str]:
    """Pure: the modules of the compiled libraries at the wheel's top level
    (``iou3d_nms_cuda.cpython-311-x86_64-linux-gnu.so`` -> ``iou3d_nms_cuda``)."""
    return frozenset(n.split(".")[0] for n in wheel_files if "/" not in n and n.endswith(".so"))


def package_imports(modules: frozenset[str], sources: Mapping[str, str]) -> dict[str, list[str]]:
    """Pure: of the wheel's top-level extension ``modules``, those the project's Python
    (``sources``: relative path to text) imports only from inside a package (``from . import
    m``, ``from det3d.ops.iou3d_nms import m``, ``import pkg.m``), each with the places
    (``file: statement``); a module also imported at the top level anywhere (a fallback in a
    ``try``) is left alone. Files that do not parse are skipped."""
    inside: dict[str, list[str]] = {}
    top: set[str] = set()
    for name, where, module, packaged in _module_imports(modules, sources):
        if packaged:
            inside.setdefault(module, []).append(f"{name}: {where}")
        else:
            top.add(module)
    return {m: places for m, places in inside.items() if m not in top}


def _module_imports(
    modules: frozenset[str], sources: Mapping[str, str]
) -> Iterator[tuple[str, str, str, bool]]:
    """Pure: each import of one of ``modules`` in ``sources`` (path -> text), by file: (the
    file, the statement as written, the module, whether it is named inside a package). Files
    that name none of them are not parsed; files that do not parse are skipped."""
    for name, text in sorted(sources.items()):
        if not any(m in text for m in modules):
            continue
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            for module, packaged in _imported(node, modules):
                yield name, ast.get_source_segment(text, node) or module, module, packaged


def _imported(node: ast.AST, modules: frozenset[str]) -> list[tuple[str, bool]]:
    """Pure: the ``modules`` an import statement names, each with whether it names it inside a
    package (True) or at the top level (False)."""
    if isinstance(node, ast.Import):
        found = []
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] in modules:
                found.append((parts[0], False))
            elif parts[-1] in modules:
                found.append((parts[-1], True))
        return found
    if isinstance(node, ast.ImportFrom):
        head = (node.module or "").split(".")[0]
        if node.level == 0 and head in modules:
            return [(head, False)]
        if node.level and head in modules:  # from .m import f
            return [(head, True)]
        return [(a.name, True) for a in node.names if a.name in modules]
    return []


def left_out_modules(modules: frozenset[str], sources: Mapping[str, str]) -> list[str]:
    """Pure: the Python files beside the project's setup.py (``sources``: relative path to
    text; the wheel holds none of them: ``packages`` takes folders) that import one of the
    wheel's top-level extension ``modules`` at the top level (DCNv2's dcn_v2.py: ``import _ext
    as _backend``; Swin's window_process.py), sorted: the wrapper a user imports, left out unless setup.py names it in
    ``py_modules``. Not a test, benchmark or demo; only a setup.py's; none where the folder
    has an ``__init__.py``: a package of a larger checkout (torch-ngp's raymarching, imported
    from there, its ``_raymarching`` from the wheel), whose Python stays in the checkout."""
    if "setup.py" not in sources or "__init__.py" in sources:
        return []
    beside = {
        name: text
        for name, text in sources.items()
        if "/" not in name and name != "setup.py" and not _not_code(name)
    }
    found = {name for name, _, _, packaged in _module_imports(modules, beside) if not packaged}
    return sorted(found)


def _not_code(name: str) -> bool:
    """Pure: whether a file beside setup.py is a test, benchmark, demo or example (Swin's
    unit_test.py), not code a user imports."""
    stem = PurePosixPath(name).stem.lower()
    return any(word in stem for word in ("test", "bench", "demo", "example"))


def left_out_modules_note(modules: list[str], extensions: list[str]) -> str:
    """Pure: what the wheel's summary says of the Python beside setup.py that imports its
    extensions (left_out_modules)."""
    return (
        f"the wheel holds {', '.join(extensions)} and none of the Python beside its setup.py "
        f"that imports it ({', '.join(modules)}): its setup.py names no py_modules, and its "
        "own pip wheel leaves them out too; that code runs only from the project's folder "
        "(on sys.path, as a build in place has it), or with py_modules naming it"
    )


def package_import_note(module: str, places: list[str]) -> str:
    """Pure: what the wheel's summary says of a top-level extension the project's code imports
    from inside a package (package_imports)."""
    shown = "; ".join(f"`{p}`" for p in places[:3]) + ("; ..." if len(places) > 3 else "")
    return (
        f"the project's code imports {module} from inside its package ({shown}), where a build "
        "in place (setup.py build_ext --inplace) puts it; the wheel installs it at the top "
        f"level, as the project's own pip wheel would (its setup.py names it {module}), where "
        f"that import does not look: with the wheel installed, import it as `import {module}`"
    )


def python_notes(
    sources: Mapping[str, str], wheel_files: list[str], empty: frozenset[str] = frozenset()
) -> list[str]:
    """Pure: what the wheel's summary says of the project's Python (``sources``: its Python
    files, relative path -> text; ``empty``: those of them that are empty) against the wheel's
    files: packages left out, an extension its code imports from inside a package, the wrappers
    beside setup.py left out."""
    notes = []
    if left_out := left_out_packages([*sources], wheel_files, empty):
        notes.append(left_out_note(left_out))
    extensions = top_level_extensions(wheel_files)
    for module, places in package_imports(extensions, sources).items():
        notes.append(package_import_note(module, places))
    if wrappers := [m for m in left_out_modules(extensions, sources) if m not in wheel_files]:
        importing = sorted(m for m in extensions if any(m in sources[w] for w in wrappers))
        notes.append(left_out_modules_note(wrappers, importing))
    return notes
