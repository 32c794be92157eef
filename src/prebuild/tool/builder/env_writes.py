"""What a classic project's build installed into the build environment itself, outside its wheel.

A build without isolation runs in the user's environment, and a setup.py can do anything there:
hqq 0.2.8's runs ``python setup_cuda.py install`` from its ``egg_info`` command, so its CUDA
extension is compiled (through prebuild's shim, for the asked arch) and installed straight into
the environment's site-packages, while its wheel holds no library. The user must hear that the
environment changed, and that the wheel lacks what was built. Compared: the top-level entries of
the environment's site-packages before and after the build (new ones, and files rewritten).
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path

# Written by imports during any build (the interpreter's byte-code of top-level modules).
_IGNORED = frozenset({"__pycache__"})

Snapshot = Mapping[Path, Mapping[str, int]]  # site dir -> entry name -> mtime (ns)


def site_dirs() -> list[Path]:
    """The site-packages folders of this interpreter's environment (the build's: it runs with
    ``sys.executable``), each once."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(Path(paths[key]) for key in ("purelib", "platlib")))


def snapshot(dirs: Iterable[Path]) -> dict[Path, dict[str, int]]:
    """The entries of each folder with their modification times (links not followed), 0 for a
    folder's: a package's folder changes when any import writes its ``__pycache__`` there, so only
    a new one counts. A folder that cannot be read has none."""
    found: dict[Path, dict[str, int]] = {}
    for folder in dirs:
        entries: dict[str, int] = {}
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    if entry.name not in _IGNORED:
                        is_dir = entry.is_dir(follow_symlinks=False)
                        mtime = 0 if is_dir else entry.stat(follow_symlinks=False).st_mtime_ns
                        entries[entry.name] = mtime
        except OSError:
            pass
        found[folder] = entries
    return found


def written(before: Snapshot, after: Snapshot) -> dict[Path, list[str]]:
    """Pure: per folder, the entries that are new or rewritten, sorted; folders with none left
    out. (An entry removed is not listed: a build that uninstalls is not the case met.)"""
    changes = {}
    for folder, now in after.items():
        was = before.get(folder, {})
        names = sorted(name for name, mtime in now.items() if was.get(name) != mtime)
        if names:
            changes[folder] = names
    return changes


def installed_distributions(changes: Mapping[Path, list[str]]) -> list[str]:
    """Pure: the distributions whose metadata the changes hold (``hqq_aten-0.0.0-py3.11.egg-info``
    -> ``hqq_aten``), which ``pip uninstall`` takes."""
    names = [
        name.split("-")[0]
        for entries in changes.values()
        for name in entries
        if name.endswith((".egg-info", ".dist-info", ".egg"))
    ]
    return list(dict.fromkeys(names))


def env_writes_message(changes: Mapping[Path, list[str]], who: str = "the project's build") -> str:
    """Pure: what the user is told of a build (``who``) that installed into its environment; ""
    for none."""
    if not changes:
        return ""
    where = "; ".join(f"{', '.join(names)} in {folder}" for folder, names in changes.items())
    undo = installed_distributions(changes)
    return (
        f"{who} installed into this environment itself, outside its wheel: {where} "
        "(its setup.py runs an install of its own, as hqq 0.2.8's `python setup_cuda.py install` "
        "does, unless another process installed them meanwhile). "
        "Other environments installing the wheel will not have them"
        + (f"; pip uninstall {' '.join(undo)} removes them here" if undo else "")
    )


def installed_since(before: Snapshot, who: str = "the project's build") -> str:
    """What ``who`` installed into the folders of ``before`` (their snapshot) since it was taken,
    said for the user (``env_writes_message``); "" for nothing. A wheel prebuild built, installed
    meanwhile, is the user's doing (another process's pip), never a setup.py's."""
    changes = {}
    for folder, names in written(before, snapshot(before)).items():
        theirs = prebuild_wheel_entries(folder, names)
        if kept := [name for name in names if name not in theirs]:
            changes[folder] = kept
    return env_writes_message(changes, who)


def prebuild_wheel_entries(folder: Path, names: Iterable[str]) -> set[str]:
    """The entries of ``folder`` that belong to a wheel prebuild built among the distributions
    ``names`` hold (a .dist-info with prebuild.json): it, and the top-level entries its RECORD
    lists (its packages, its guard and the guard's .pth)."""
    found: set[str] = set()
    for name in names:
        record = folder / name / "RECORD"
        if not name.endswith(".dist-info") or not (folder / name / "prebuild.json").is_file():
            continue
        try:
            lines = record.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        found.add(name)
        found.update(line.split(",", 1)[0].split("/", 1)[0] for line in lines if line)
    return found


def with_installed(message: str, installed: str) -> str:
    """Pure: an error ``message`` followed by what was ``installed`` meanwhile
    (``installed_since``), so that a failure or a refusal still says the environment changed."""
    return f"{message}\n\nAlso, {installed}." if installed else message
