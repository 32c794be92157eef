"""prebuild.tool.doctor.first_use: the installed packages that will compile at first use,
found in a site directory holding distributions shaped like gsplat from PyPI (CUDA sources, a
JIT call, nothing prebuilt) and others that do not compile."""

from __future__ import annotations

from pathlib import Path

from prebuild.tool.doctor.first_use import CompilesAtFirstUse, installed_compilers

BACKEND = """from torch.utils.cpp_extension import (
    _get_build_directory,
    _jit_compile,
)
def build():
    return _jit_compile("x_cuda", [])
"""


def distribution(site: Path, name: str, files: dict[str, str]) -> None:
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in [*files, f"{info.name}/METADATA"]))


def test_packages_with_cuda_sources_a_jit_call_and_nothing_prebuilt(tmp_path):
    distribution(
        tmp_path,
        "jitproj",
        {"jitproj/__init__.py": "", "jitproj/_backend.py": BACKEND, "jitproj/csrc/a.cu": ""},
    )
    # prebuilt (an extension beside its sources), no JIT call, or no CUDA source: not listed
    distribution(
        tmp_path,
        "built",
        {"built/_backend.py": BACKEND, "built/csrc/a.cu": "", "built/_C.so": ""},
    )
    distribution(tmp_path, "sources", {"sources/__init__.py": "", "sources/k.cuh": ""})
    distribution(tmp_path, "pure", {"pure/_backend.py": BACKEND})
    assert installed_compilers([str(tmp_path)]) == [
        CompilesAtFirstUse("jitproj", "1.0", ("jitproj/_backend.py:6",), 1)
    ]
