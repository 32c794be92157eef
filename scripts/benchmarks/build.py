"""Section 1, build: ``prebuild wheel --arch sm_80`` from a clean build directory, with nothing
changed and after a one-file change (wall time and peak memory), and the wheels' sizes per arch
and fat, with and without fatbin compression. Also the source copy and wheel command the gpu and
cache sections reuse."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from . import ROOT
from .processes import run_measured
from .stats import stat

ONE_FILE = "csrc/ssim/ssim_cuda.cu"  # the file touched for the one-file-change rebuild
# --quick (a smoke test of the section): the smallest native project, `prebuild new`'s one op.
ONE_FILE_QUICK = "csrc/scale_add/scale_add_cpu.cpp"


def scaffolded_project(work: Path) -> Path:
    """A fresh `prebuild new demo` project in ``work``: one op, seconds to compile (--quick)."""
    shutil.rmtree(work / "demo", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "prebuild", "new", "demo"], cwd=work, check=True, capture_output=True
    )
    return work / "demo"


def copy_source(dest: Path) -> Path:
    """A copy of the checkout's build inputs, so the one-file change never touches the tree."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("*.so", "_manifest.json", "__pycache__", "*.egg-info")
    for name in ("csrc", "src"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    return dest


def wheel_cmd(src: Path, build: Path, out: Path, archs: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "prebuild",
        "wheel",
        str(src),
        "--arch",
        archs,
        "--build-dir",
        str(build),
        "--out",
        str(out),
        *extra,
    ]


def cpu_only_cmd(src: Path, build: Path) -> list[str]:
    """--quick: the same compile step as ``prebuild wheel``, CPU library only (no nvcc)."""
    code = (
        "from pathlib import Path; from prebuild.tool.builder.compile import compile_libraries; "
        "from prebuild.tool.builder.config import read_config; "
        "from prebuild.tool.builder.flags import BuildOptions; "
        f"compile_libraries(read_config(Path({str(src)!r})), BuildOptions(archs=(), ptx=False, "
        f"build_dir=Path({str(build)!r})))"
    )
    return [sys.executable, "-c", code]


def section_build(cfg: argparse.Namespace, work: Path) -> dict:
    src = scaffolded_project(work / "scaffold") if cfg.quick else copy_source(work / "src")
    build, out = work / "objects", work / "dist"
    touched = ONE_FILE_QUICK if cfg.quick else ONE_FILE
    cmd = cpu_only_cmd(src, build) if cfg.quick else wheel_cmd(src, build, out, "sm_80")
    runs: dict[str, list[dict]] = {"clean": [], "no-change": [], "one-file change": []}
    for _ in range(cfg.build_repeats):
        shutil.rmtree(build, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        runs["clean"].append(run_measured(cmd, cwd=src))
    for _ in range(cfg.build_repeats):
        runs["no-change"].append(run_measured(cmd, cwd=src))
    for _ in range(cfg.build_repeats):
        os.utime(src / touched)  # what an edit looks like to ninja (mtime); the content stays
        runs["one-file change"].append(run_measured(cmd, cwd=src))
    result = {
        "command": shlex.join(["prebuild", "wheel", "--arch", "sm_80"])
        if not cfg.quick
        else "compile_libraries(archs=()) of a `prebuild new` project (CPU library only: --quick)",
        "touched": touched,
        "rows": {
            k: {
                "seconds": stat([r["seconds"] for r in v]),
                "peak_rss": stat([r["peak_rss"] for r in v]),
            }
            for k, v in runs.items()
        },
        "sizes": [],
    }
    if cfg.quick:
        from prebuild.tool.builder.compile import host_build_dir

        (lib,) = host_build_dir(build).glob("*.so")
        result["sizes"].append(
            {
                "what": f"CPU library {lib.name} of a `prebuild new` project (--quick: no wheel)",
                "compress": True,
                "bytes": lib.stat().st_size,
                "cuda_library": 0,
            }
        )
        return result
    for fat in (False, True):
        for compress in (True, False):
            target = work / "sizes" / f"{'fat' if fat else 'per-arch'}-{'z' if compress else 'raw'}"
            shutil.rmtree(target, ignore_errors=True)
            extra = (["--fat"] if fat else []) + ([] if compress else ["--no-compress"])
            run_measured(wheel_cmd(src, build, target, "sm_80,sm_90", *extra), cwd=src)
            for whl in sorted(target.glob("*.whl")):
                result["sizes"].append(
                    {
                        "what": whl.name,
                        "compress": compress,
                        "bytes": whl.stat().st_size,
                        "cuda_library": _member_size(whl, "_C_cuda.abi3.so"),
                    }
                )
    result["cuda_libraries"] = {
        p.parent.name: str(p) for p in sorted((build / "cuda").glob("*/_C_cuda.abi3.so"))
    }
    return result


def _member_size(wheel: Path, name: str) -> int:
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        return sum(i.file_size for i in z.infolist() if i.filename.endswith("/" + name))
