"""Whether a classic wheel's libraries use Python's C API, and the tag of one that does not.

setuptools tags a wheel with an extension for the Python that built it (``cp311-cp311``). A
library loaded by ctypes (bitsandbytes': its setup.py only says it has extension modules) calls
nothing of Python's, so the wheel serves every Python: bitsandbytes' own release wheels are
retagged ``py3-none`` with ``wheel tags``. prebuild's guard, which the wheel carries, needs
Python 3.10, hence ``py310``: pip and uv take it for CPython 3.10 and every later one.

Pure functions over symbol names and tags; the builder reads the symbols from the wheel
(``inspection.undefined_symbols``, ``dynamic_symbols``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Python's C API: Py_BuildValue, PyObject_Call, PyExc_TypeError, _Py_Dealloc, _PyObject_New...
_PYTHON_API = re.compile(r"^_?Py[A-Z_]")
# A CPython-specific tag as a build makes it: cp311-cp311 (or cp313-cp313t), not abi3.
_CPYTHON_TAG = re.compile(r"^cp3\d+-cp3\d+t?-(.+)$")
_ONE_PYTHON_SUFFIX = re.compile(r"\.cpython-\d+[a-z]*-[^/]*\.so$")
ANY_PYTHON = "py310"  # the oldest Python prebuild's guard runs on (requires-python >= 3.10)


def python_api_symbols(names: Iterable[str]) -> list[str]:
    """The names among ``names`` (needed or defined) that belong to Python's C API, sorted."""
    return sorted(n for n in names if _PYTHON_API.match(n))


def uses_python_api(
    undefined: Mapping[str, Iterable[str]],
    defined: Mapping[str, Iterable[str]],
    needed: Mapping[str, Iterable[str]],
) -> bool:
    """Whether any library calls Python's C API, is an extension module (defines
    ``PyInit_*``) or links libpython; True where a library's symbols could not be read (none
    found) or there is no library: only what was read can free a wheel of its Python."""
    if not undefined or not all(undefined.values()):
        return True
    return (
        any(python_api_symbols(names) for names in undefined.values())
        or any(n.startswith("PyInit_") for names in defined.values() for n in names)
        or any(n.startswith("libpython") for names in needed.values() for n in names)
    )


def python_suffixed(libraries: Iterable[str]) -> list[str]:
    """The libraries named for one Python (``_C.cpython-311-x86_64-linux-gnu.so``), sorted: a
    package may find such a file by the running Python's extension suffixes (torchvision's
    ``_get_extension_path``), which another Python's do not match, so its wheel keeps its tag."""
    return sorted(name for name in libraries if _ONE_PYTHON_SUFFIX.search(name))


def any_python_tag(tag: str) -> str | None:
    """``cp311-cp311-linux_x86_64`` -> ``py310-none-linux_x86_64``: the tag of a wheel whose
    libraries use nothing of Python's; None for a tag that is not one CPython's (``abi3`` and
    ``py3`` wheels already serve several)."""
    match = _CPYTHON_TAG.match(tag)
    return f"{ANY_PYTHON}-none-{match.group(1)}" if match else None


def any_python_note(built_tag: str, tag: str) -> str:
    """The summary's note on a wheel retagged for every Python."""
    return (
        f"its libraries use nothing of Python's C API (none is an extension module): tagged "
        f"{tag.rsplit('-', 1)[0]}, for every Python from 3.10 on, not "
        f"{built_tag.split('-', 1)[0]} alone"
    )


def python_floor(tag: str) -> str | None:
    """The oldest Python a wheel's tag serves with every later one: ``3.10`` for
    ``py310-none-...``, ``3.9`` for ``cp39-abi3-...``; None for one Python's (``cp311-cp311``)."""
    match = re.match(r"^(?:py3(\d+)-none|cp3(\d+)-abi3)-", tag)
    return f"3.{match.group(1) or match.group(2)}" if match else None
