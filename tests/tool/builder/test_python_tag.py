"""Whether a classic wheel's libraries use Python's C API (builder/python_tag.py): a wheel of
ctypes libraries serves every Python from 3.10 on, tagged so."""

from __future__ import annotations

import pytest
from c_libraries import shared_library
from packaging.tags import Tag, compatible_tags, cpython_tags

from prebuild.tool.builder.python_tag import (
    any_python_note,
    any_python_tag,
    python_api_symbols,
    python_floor,
    python_suffixed,
    uses_python_api,
)
from prebuild.tool.builder.relabel import retagged_wheel_info
from prebuild.tool.inspection import dynamic_symbols

# A pybind11 or plain C extension's needs, and a ctypes library's.
EXTENSION = ["PyModule_Create2", "_Py_Dealloc", "PyExc_TypeError", "Py_BuildValue", "memcpy"]
CTYPES = ["cudaLaunchKernel", "__cudaRegisterFatBinary", "memcpy", "_ZdlPv", "Pythagoras"]


def test_python_s_c_api_names_are_told_from_others():
    assert python_api_symbols(EXTENSION + CTYPES) == sorted(EXTENSION[:4])


def test_only_libraries_read_and_free_of_python_free_the_wheel():
    free = {"pkg/libk.so": CTYPES}
    assert not uses_python_api(
        free, {"pkg/libk.so": ["kernel_add"]}, {"pkg/libk.so": ["libc.so.6"]}
    )
    # an extension module: Python's names needed, or PyInit_ defined, or libpython linked
    assert uses_python_api({**free, "pkg/_C.so": EXTENSION}, {}, {})
    assert uses_python_api(free, {"pkg/libk.so": ["PyInit__C"]}, {})
    assert uses_python_api(free, {}, {"pkg/libk.so": ["libpython3.11.so.1.0"]})
    # a library whose symbols were not read, or none at all: not freed
    assert uses_python_api({**free, "pkg/odd.so": []}, {}, {})
    assert uses_python_api({}, {}, {})


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("cp311-cp311-linux_x86_64", "py310-none-linux_x86_64"),
        ("cp313-cp313t-manylinux_2_28_x86_64", "py310-none-manylinux_2_28_x86_64"),
        ("cp39-abi3-linux_x86_64", None),  # abi3 already serves several
        ("py3-none-linux_x86_64", None),
        ("pp310-pypy310_pp73-linux_x86_64", None),
    ],
)
def test_a_cpython_tag_becomes_every_python_s(tag, expected):
    assert any_python_tag(tag) == expected


def test_pip_s_tags_take_py310_for_every_python_from_3_10():
    """packaging's tags (pip's and uv's rules): CPython 3.10 and 3.14 take py310, 3.9 does not."""
    wanted = Tag("py310", "none", "linux_x86_64")

    def takes(version: tuple[int, int]) -> bool:
        tags = [*cpython_tags(version, platforms=["linux_x86_64"])]
        tags += compatible_tags(version, f"cp{version[0]}{version[1]}", ["linux_x86_64"])
        return wanted in tags

    assert [takes(v) for v in ((3, 9), (3, 10), (3, 11), (3, 14))] == [False, True, True, True]


def test_the_note_names_both_tags():
    note = any_python_note("cp311-cp311-linux_x86_64", "py310-none-linux_x86_64")
    assert "tagged py310-none, for every Python from 3.10 on, not cp311 alone" in note


def test_a_real_ctypes_library_and_a_real_extension_are_told_apart(tmp_path):
    """Compiled here: a library of C functions, and one using Python's C API."""
    free = shared_library(tmp_path / "libfree.so", "int add(int a, int b) { return a + b; }\n")
    ext = shared_library(
        tmp_path / "_ext.so",
        "void* PyLong_FromLong(long); void* PyInit__ext(void) { return PyLong_FromLong(1); }\n",
    )
    for library, uses in ((free, False), (ext, True)):
        defined, undefined = dynamic_symbols(library.read_bytes())
        name = library.name
        assert uses_python_api({name: undefined}, {name: defined}, {}) is uses, name


def test_the_wheel_file_s_tags_are_replaced_by_one():
    text = "Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: false\nTag: cp311-cp311-linux_x86_64\n"
    assert retagged_wheel_info(text, "py310-none-linux_x86_64") == (
        "Wheel-Version: 1.0\nGenerator: setuptools\nRoot-Is-Purelib: false\n"
        "Tag: py310-none-linux_x86_64\n"
    )


def test_a_library_named_for_one_python_keeps_the_wheel_s_tag():
    """A package may find its library by the running Python's extension suffixes: one named
    for CPython 3.11 would not be found by 3.12's."""
    names = [
        "pkg/_C.cpython-311-x86_64-linux-gnu.so",
        "pkg/_D.cpython-313t-x86_64-linux-gnu.so",
        "pkg/_kernels.so",
        "pkg/_ops.abi3.so",
        "pkg/libbitsandbytes_cuda130.so",
    ]
    assert python_suffixed(names) == names[:2]


@pytest.mark.parametrize(
    ("tag", "floor"),
    [
        ("py310-none-linux_x86_64", "3.10"),
        ("cp39-abi3-linux_x86_64", "3.9"),
        ("cp311-cp311-linux_x86_64", None),
        ("py3-none-any", None),  # not one prebuild makes: its floor is not in the tag
    ],
)
def test_the_oldest_python_a_tag_serves_with_every_later_one(tag, floor):
    assert python_floor(tag) == floor
