#!/usr/bin/env python3
"""Before/after timings of the CPU kernels: two builds of prebuild measured in the same run,
interleaved, with the steps of ``scripts/bench.py --sections cpu`` (fused_ssim forward +
backward; rasterization forward + backward on the bench's scenes).

Each build is a source tree whose ``src/`` holds built libraries; a child interpreter per
build and round imports prebuild from it (``PYTHONPATH``), so the rounds alternate between
builds and a slow spell of the machine hits both. Prints a Markdown table for
docs/benchmarks-history.md: median (min-max) per build and round.

Build the "before" tree from a commit (the CPU libraries only, ~1 minute):

  git worktree add /tmp/before HEAD
  (cd /tmp/before && PREBUILD_ARCHS= ../main/.venv/bin/python setup.py -q build_ext --inplace)

Examples:

  .venv/bin/python scripts/cpu_ab.py /tmp/before .                  # SSIM and rasterization
  .venv/bin/python scripts/cpu_ab.py /tmp/before . --ops ssim --rounds 3
  PREBUILD_CPU_ISA=baseline .venv/bin/python scripts/cpu_ab.py /tmp/before .
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
SSIM_SIZES = [
    (1, 256, 256),
    (4, 256, 256),
    (1, 512, 512),
    (4, 512, 512),
    (1, 1080, 1920),
    (4, 1080, 1920),
]
RASTER_COUNTS = [1_000, 10_000, 100_000]
QUICK_SSIM_SIZES, QUICK_RASTER_COUNTS = (
    [(1, 32, 32)],
    [100],
)  # --quick: runs end to end, means nothing

# Runs in a child whose PYTHONPATH is one build's src/; prints one JSON line of samples.
CHILD = r"""
import json, sys, time
sys.path.insert(1, sys.argv[1])  # scripts/: the bench's scene and its timing helper
import torch, prebuild
from benchmarks.cpu import raster_scene
from benchmarks.stats import time_fn
ops, ssim_sizes = sys.argv[2].split(","), json.loads(sys.argv[3])
counts, repeats = json.loads(sys.argv[4]), int(sys.argv[5])
rows = {"where": prebuild.__file__}
if "ssim" in ops:
    for b, h, w in ssim_sizes:
        gen = torch.Generator().manual_seed(0)
        x = torch.rand(b, 3, h, w, generator=gen).requires_grad_()
        y = torch.rand(b, 3, h, w, generator=gen)
        def step():
            x.grad = None
            prebuild.fused_ssim(x, y).backward()
        rows[f"fused_ssim B={b} {h}x{w}"] = time_fn(step, max(3, repeats // 2) if h * w * b > 2_000_000 else repeats)
if "raster" in ops:
    for n in counts:
        s = raster_scene(n, 256)
        leaves = [s[k].requires_grad_() for k in ("means", "quats", "scales", "opacities", "colors")]
        def step():
            for v in leaves:
                v.grad = None
            colors, _, _ = prebuild.rasterization(**s, width=256, height=256)
            colors.sum().backward()
        rows[f"rasterization {n:,} Gaussians"] = time_fn(step, max(3, repeats // 2) if n >= 100_000 else repeats)
print(json.dumps(rows))
"""


def measure(tree: Path, ops: list[str], repeats: int, quick: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    sizes, counts = (
        (QUICK_SSIM_SIZES, QUICK_RASTER_COUNTS) if quick else (SSIM_SIZES, RASTER_COUNTS)
    )
    args = [
        sys.executable,
        "-c",
        CHILD,
        str(ROOT / "scripts"),
        ",".join(ops),
        json.dumps(sizes),
        json.dumps(counts),
        str(repeats),
    ]
    proc = subprocess.run(args, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"cpu_ab: measuring {tree} failed:\n{proc.stderr.strip()}")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = (tree / "src" / "prebuild" / "__init__.py").resolve()
    if Path(rows.pop("where")).resolve() != expected:
        raise SystemExit(f"cpu_ab: the child imported prebuild from elsewhere than {expected}")
    return rows


def fmt(stat: dict) -> str:
    from benchmarks.stats import fmt_time

    return f"{fmt_time(stat['median'])} ({fmt_time(stat['min'])}-{fmt_time(stat['max'])})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", type=Path, help="source tree of the old build (its src/ built)")
    parser.add_argument("after", type=Path, help="source tree of the new build (its src/ built)")
    parser.add_argument("--ops", default="ssim,raster", help="ssim, raster or both (default: both)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved rounds per build (default: 2)"
    )
    parser.add_argument(
        "--repeats", type=int, default=11, help="timed steps per row (halved for the largest)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: checks the script, measures nothing"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeats < 1:
        parser.error("--rounds and --repeats must be at least 1")
    ops = [o for o in args.ops.split(",") if o]
    if not ops or any(o not in ("ssim", "raster") for o in ops):
        parser.error(f"--ops takes ssim, raster or ssim,raster, got {args.ops!r}")
    for tree in (args.before, args.after):
        if not any((tree / "src" / "prebuild").glob("_C*.so")):
            parser.error(f"{tree}/src/prebuild holds no built library; build it first (see --help)")
    results: dict[str, list[list[dict]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for name, tree in (("before", args.before), ("after", args.after)):
            print(f"round {r + 1}/{args.rounds}: {name} ({tree})", file=sys.stderr, flush=True)
            results[name].append(measure(tree, ops, args.repeats, args.quick))
    isa = os.environ.get("PREBUILD_CPU_ISA") or "best"
    print(f"| step (PREBUILD_CPU_ISA={isa}) | before | after |")
    print("|---|---|---|")
    for row in results["before"][0]:
        cells = [
            ", ".join(fmt(rounds[row]) for rounds in results[name]) for name in ("before", "after")
        ]
        print(f"| {row} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
