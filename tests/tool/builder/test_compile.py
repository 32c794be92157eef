"""prebuild.tool.builder.compile's ninja files: libraries built together by one ninja run,
largest source first, and the object-name clash that would make them overwrite each other."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from prebuild.tool.builder.compile import LibrarySpec, run_ninja, write_ninja
from prebuild.tool.builder.toolchain import find_cxx


def spec(output: str, sources: list[Path]) -> LibrarySpec:
    return LibrarySpec(
        output=output,
        what=f"C++ {output}",
        compiler=find_cxx(),
        compile_flags=["-O0", "-fPIC"],
        depfile="-MMD -MF $out.d",
        link_flags=["-shared"],
        sources=sources,
    )


def write_sources(root: Path, sizes: dict[str, int]) -> dict[str, Path]:
    """C files each defining `int <stem>(void)`, padded with comments to the given size."""
    paths = {}
    for name, size in sizes.items():
        code = f'extern "C" int {Path(name).stem}(void) {{ return {len(name)}; }}\n'
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(code + "//" + "x" * max(0, size - len(code) - 3) + "\n")
        paths[name] = root / name
    return paths


def test_two_libraries_build_in_one_run_largest_source_first(tmp_path):
    src, build = tmp_path / "csrc", tmp_path / "build"
    (build / "obj").mkdir(parents=True)
    files = write_sources(
        src, {"a/small.cpp": 100, "a/big.cpp": 5000, "b/mid_simt.cpp": 2000, "lib.cpp": 50}
    )
    first = spec("liba.so", [files["a/small.cpp"], files["a/big.cpp"], files["lib.cpp"]])
    second = spec("libb.so", [files["b/mid_simt.cpp"]])

    text = write_ninja(src, build, [first, second]).read_text()
    compiles = [
        line.split(":")[0].removeprefix("build ")
        for line in text.splitlines()
        if line.startswith("build obj/")
    ]
    assert compiles == [
        "obj/a__big.cpp.o",
        "obj/b__mid_simt.cpp.o",
        "obj/a__small.cpp.o",
        "obj/lib.cpp.o",
    ]

    steps = []
    run_ninja(build, 2, lambda done, total, what: steps.append((done, total)))
    assert steps[-1] == (6, 6)  # four compiles and two links, one run
    assert ctypes.CDLL(str(build / "liba.so")).big() == len("a/big.cpp")
    assert ctypes.CDLL(str(build / "libb.so")).mid_simt() == len("b/mid_simt.cpp")
    with pytest.raises(AttributeError):
        ctypes.CDLL(str(build / "libb.so")).small  # each library links only its own objects


def test_libraries_built_together_must_not_share_an_object_name(tmp_path):
    files = write_sources(tmp_path, {"x.cpp": 10})
    (tmp_path / "obj").mkdir()
    with pytest.raises(ValueError, match="share an object name"):
        write_ninja(
            tmp_path,
            tmp_path,
            [spec("liba.so", [files["x.cpp"]]), spec("libb.so", [files["x.cpp"]])],
        )
