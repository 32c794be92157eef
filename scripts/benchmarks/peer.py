"""Section 1b, peer (opt-in): the JIT build gsplat 1.5.3 users sit through on first import,
``torch.utils.cpp_extension.load`` of its CUDA sources for sm_80, in a separate venv with the CUDA
build of torch 2.14.1."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .processes import run_measured
from .stats import stat

GSPLAT_VERSION = "1.5.3"
JIT_TORCH = "2.14.1"

GSPLAT_CHILD = r"""
import glob, importlib.util, json, os, sys, time
import torch
from torch.utils.cpp_extension import load
spec = importlib.util.find_spec("gsplat")  # not imported: that would start its own JIT
path = os.path.join(list(spec.submodule_search_locations)[0], "cuda")
sources = (glob.glob(os.path.join(path, "csrc/*.cu")) + glob.glob(os.path.join(path, "csrc/*.cpp"))
           + [os.path.join(path, "ext.cpp")])
t0 = time.perf_counter()
loaded = "yes"
try:  # gsplat 1.5.3's own flags (gsplat/cuda/_backend.py)
    load("gsplat_cuda", sources, extra_cflags=["-O3", "-Wno-attributes"],
         extra_cuda_cflags=["-O3", "-use_fast_math"],
         extra_include_paths=[os.path.join(path, "include"), os.path.join(path, "csrc/third_party/glm")],
         build_directory=sys.argv[1], verbose=False)
except ImportError as exc:  # compiled, but importing needs a CUDA driver this machine lacks
    loaded = f"compiled; import failed: {exc}"[:200]
print(json.dumps({"seconds": time.perf_counter() - t0, "sources": len(sources), "loaded": loaded}))
"""


def jit_venv(work: Path) -> Path:
    """The separate venv for the peer: torch 2.14.1 (CUDA 13.0 build), ninja, gsplat --no-deps."""
    venv = work / "venv-jit"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    have = subprocess.run(
        [str(python), "-c", "import torch, ninja; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout
    if not have.startswith(JIT_TORCH):
        subprocess.run([*pip, f"torch=={JIT_TORCH}", "ninja"], check=True)
    if subprocess.run(
        [str(python), "-c", "import importlib.util as u; assert u.find_spec('gsplat')"]
    ).returncode:
        subprocess.run([*pip, "--no-deps", f"gsplat=={GSPLAT_VERSION}"], check=True)
    return python


def section_peer(cfg: argparse.Namespace, work: Path) -> dict:
    python = jit_venv(work.parent)  # shared by runs: making it takes minutes
    build = work / "gsplat-jit"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST="8.0", MAX_JOBS=os.environ.get("MAX_JOBS", "10"))
    env.setdefault("CUDA_HOME", "/usr/local/cuda")
    script = work / "gsplat_child.py"
    script.write_text(GSPLAT_CHILD)
    r = run_measured([str(python), str(script), str(build)], env=env, timeout=cfg.peer_timeout)
    info = json.loads(r["output"].strip().splitlines()[-1])
    torch_version = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "seconds": stat([r["seconds"]]),
        "load_seconds": info["seconds"],
        "peak_rss": stat([r["peak_rss"]]),
        "sources": info["sources"],
        "loaded": info["loaded"],
        "torch": torch_version,
        "max_jobs": env["MAX_JOBS"],
        "arch": "sm_80 (TORCH_CUDA_ARCH_LIST=8.0)",
    }
