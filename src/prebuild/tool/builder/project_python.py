"""The project's own Python that its wheel leaves out.

A setup.py that lists ``ext_modules`` and no ``packages`` gets none (setuptools looks for
packages by itself only where nothing is listed), and ``find_packages()`` skips a folder without
``__init__.py``: raytracing's wheel holds its extension and not ``raytracing/``, BEVDepth's its
two extensions and none of ``bevdepth/``. The wheel builds and installs; ``import raytracing``
fails on the user's machine. What the project's own ``pip wheel`` would leave out too, so it is
said, not changed. Pure functions over file names.
"""

from __future__ import annotations

from pathlib import PurePosixPath

# Top-level folders of Python that are not what a user imports.
NOT_PACKAGES = frozenset(
    {"test", "tests", "doc", "docs", "example", "examples", "script", "scripts", "tools",
     "benchmark", "benchmarks", "bench", "configs", "demo", "demos", "build", "dist"}
)  # fmt: skip


def left_out_packages(project_files: list[str], wheel_files: list[str]) -> list[str]:
    """Pure: the project's top-level folders of Python (``project_files``: its files, relative
    paths) of which the wheel (``wheel_files``: its names) holds no Python file, where the
    folder is a package (``__init__.py``) or the wheel holds other files of it (BEVDepth's
    extensions under ``bevdepth/ops/``); sorted. Only a setup.py's: another backend's wheel
    holds what its configuration names (scikit-build-core's ``wheel.packages``: xlstm's
    ``experiments/`` is scripts, left out as meant)."""
    if "setup.py" not in project_files:
        return []
    shipped = {PurePosixPath(n).parts[0] for n in wheel_files if n.endswith(".py")}
    in_wheel = {PurePosixPath(n).parts[0] for n in wheel_files if "/" in n}
    python = {
        parts[0]
        for parts in (PurePosixPath(f).parts for f in project_files)
        if len(parts) > 1 and parts[-1].endswith(".py") and not parts[0].startswith(".")
    }
    packages = {
        f.split("/")[0] for f in project_files if f.count("/") == 1 and f.endswith("/__init__.py")
    }
    return sorted(
        folder
        for folder in python - shipped - NOT_PACKAGES
        if folder in packages or folder in in_wheel
    )


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
