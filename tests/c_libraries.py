"""Shared libraries the tests compile of a few lines of C, with the compiler setuptools would
use: ``shared_library``, and a wheel holding one: ``library_wheel``. Importable by name: pytest
puts tests/ on sys.path for tests/conftest.py."""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

CC = sysconfig.get_config_var("CC").split()[0]  # the C compiler setuptools would use


def shared_library(path: Path, source: str, *options: str, soname: str = "") -> Path:
    """``path`` compiled of C ``source`` with ``options`` (link options among them), calling
    itself ``soname`` (its file name by default; a link of that name to it otherwise, as
    distributions install libklu.so.1.3.8)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    c = path.parent / (path.name.split(".")[0] + ".c")
    c.write_text(source)
    soname = soname or path.name
    done = subprocess.run(
        [CC, "-xc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", str(c), "-o", str(path),
         *options],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if soname != path.name:
        (path.parent / soname).symlink_to(path.name)
    return path


def library_wheel(directory: Path, library: Path, member: str) -> Path:
    """``pkg-0.1.0-cp311-cp311-linux_x86_64.whl`` in ``directory``, holding ``library`` as
    ``member`` (``pkg/_native.so``) beside an empty ``pkg/__init__.py``."""
    from wheel.wheelfile import WheelFile

    wheel = directory / "pkg-0.1.0-cp311-cp311-linux_x86_64.whl"
    with WheelFile(wheel, "w") as wf:
        wf.write(str(library), member)
        wf.writestr("pkg/__init__.py", "")
        wf.writestr(
            "pkg-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 0.1.0\n"
        )
        wf.writestr(
            "pkg-0.1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
            "Tag: cp311-cp311-linux_x86_64\n",
        )
    return wheel
