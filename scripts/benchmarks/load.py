"""Section 2, load: a fresh interpreter (after ``import torch``) to the first op result, our
installed library against ``cpp_extension.load`` of an equivalent small CPU extension, with a
cold and a warm cache. Its children and extensions are also section 3's (``contention``). Also
what the guard of a classic wheel (prebuild.runtime.classic_guard) costs at Python's start-up
and at the import of ``torch.utils.cpp_extension``."""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import sys
from pathlib import Path

from .processes import child_seconds
from .stats import stat

# The op each child calls once. Ours: the installed library. JIT: a one-op extension of the
# kind fused-ssim and gsplat ship (torch/extension.h + pybind11), or under --quick a
# stable-ABI one (the same compile path, seconds instead of ~30 s).
OURS_CHILD = """
import json, time, torch
t0 = time.perf_counter()
import prebuild
x = torch.rand(1, 3, 16, 16)
float(prebuild.fused_ssim(x, x))
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

PYBIND_SOURCE = """
#include <torch/extension.h>
torch::Tensor mul_mean(torch::Tensor x, torch::Tensor y) { return (x * y).mean(); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("mul_mean", &mul_mean); }
"""

STABLE_SOURCE = """
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
using torch::stable::Tensor;
Tensor copy_of(Tensor x) { Tensor y = torch::stable::empty_like(x); return torch::stable::copy_(y, x); }
STABLE_TORCH_LIBRARY(bench_jit, m) { m.def("copy_of(Tensor x) -> Tensor"); }
STABLE_TORCH_LIBRARY_IMPL(bench_jit, CPU, m) { m.impl("copy_of", TORCH_BOX(&copy_of)); }
"""

JIT_CHILD = """
import json, time, torch
t0 = time.perf_counter()
from torch.utils.cpp_extension import load
x = torch.rand(1, 3, 16, 16)
if {stable}:
    load("bench_jit_stable", [{source!r}], is_python_module=False,
         extra_cflags=["-DTORCH_TARGET_VERSION=0x020d000000000000"])
    float(torch.ops.bench_jit.copy_of(x).sum())
else:
    float(load("bench_jit_pybind", [{source!r}]).mul_mean(x, x))
print(json.dumps({{"seconds": time.perf_counter() - t0}}))
"""


def jit_extensions(work: Path) -> dict[str, str]:
    """name -> child code, for both flavours of the small JIT extension."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "pybind_ext.cpp").write_text(PYBIND_SOURCE)
    (work / "stable_ext.cpp").write_text(STABLE_SOURCE)
    return {
        "pybind": JIT_CHILD.format(stable=False, source=str(work / "pybind_ext.cpp")),
        "stable": JIT_CHILD.format(stable=True, source=str(work / "stable_ext.cpp")),
    }


# The site directory is added the way site adds site-packages at start-up (its .pth files run):
# the difference between the two is what a guarded wheel adds to every Python start.
GUARD_CHILD = """
import site, time
{before}
t0 = time.perf_counter()
site.addsitedir({site!r})
{then}
print('{{"seconds": %r}}' % (time.perf_counter() - t0))
"""


def guarded_site(work: Path) -> Path:
    """A site directory holding one classic wheel's guard, as guard_files.py writes it."""
    import zipfile

    from prebuild.tool.builder.guard_files import guard_files

    site = work / "guarded-site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    wheel = work / "proj-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("proj/__init__.py", "")
    for name, text in guard_files(wheel, "proj", "1.0", "proj-1.0.dist-info", "proj==1.0").items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    compileall.compile_dir(site, quiet=1)  # as pip does at install time
    return site


def guard_costs(work: Path, repeats: int, timeout: float) -> dict:
    """Median seconds of a child adding an empty site directory and one holding a guard, the
    way site adds site-packages at start-up; then of importing torch.utils.cpp_extension
    (after torch) without and with the guard, which wraps its compile entry points. A child
    counts as hung after ``timeout`` (--timeout: a niced job's children may wait for a core)."""
    empty, guarded = work / "empty-site", guarded_site(work)
    empty.mkdir(parents=True, exist_ok=True)
    steps = (
        ("start-up", "", "pass"),
        ("importing torch.utils.cpp_extension", "import torch", "import torch.utils.cpp_extension"),
    )
    rows = {}
    for label, before, then in steps:
        for which, site in (("without a guard", empty), ("with a classic wheel's guard", guarded)):
            code = GUARD_CHILD.format(site=str(site), before=before, then=then)
            samples = [
                child_seconds(sys.executable, code, _child_env(), timeout) for _ in range(repeats)
            ]
            rows[f"{label}, {which}"] = stat(samples)
    return rows


def _child_env(extensions_dir: Path | None = None) -> dict:
    env = dict(os.environ)
    env.pop("TORCH_EXTENSIONS_DIR", None)
    if extensions_dir is not None:
        env["TORCH_EXTENSIONS_DIR"] = str(extensions_dir)
    return env


def section_load(cfg: argparse.Namespace, work: Path) -> dict:
    codes = jit_extensions(work)
    flavours = ["stable"] if cfg.quick else ["pybind", "stable"]
    rows = {
        "prebuild (installed library)": stat(
            [
                child_seconds(sys.executable, OURS_CHILD, _child_env(), cfg.timeout)
                for _ in range(cfg.repeats)
            ]
        )
    }
    for flavour in flavours:
        cold = []
        for i in range(cfg.cold_repeats):
            cache = work / "cache" / f"cold-{flavour}-{i}"
            shutil.rmtree(cache, ignore_errors=True)
            cold.append(
                child_seconds(sys.executable, codes[flavour], _child_env(cache), cfg.timeout)
            )
        warm_cache = work / "cache" / f"cold-{flavour}-0"  # now warm
        warm = [
            child_seconds(sys.executable, codes[flavour], _child_env(warm_cache), cfg.timeout)
            for _ in range(cfg.repeats)
        ]
        label = "torch/extension.h + pybind11" if flavour == "pybind" else "stable-ABI headers"
        rows[f"JIT load, {label}, cold cache"] = stat(cold)
        rows[f"JIT load, {label}, warm cache"] = stat(warm)
    return {"rows": rows, "guard": guard_costs(work, max(cfg.repeats, 5), cfg.timeout)}
