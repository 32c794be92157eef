"""The host path of one ``prebuild.rasterization`` training step, measured on the CPU.

A tiny scene (200 Gaussians, 64x64, one camera) keeps the kernels' own time negligible, so
what is left is the host path a GPU step pays too: Python, the dispatcher, the number of ops.
Prints, per mode (packed and dense): the step's median time, the aten ops it dispatches (a
TorchDispatchMode counting them, forward and backward) and, with ``--cprofile``, the Python
functions where the time goes.

    .venv/bin/python scripts/raster_host.py [--n 200] [--size 64] [--repeats 300] [--cprofile]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks.cpu import raster_scene

import prebuild


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _step(scene: dict, size: int, packed: bool) -> None:
    for t in scene.values():
        t.grad = None
    colors, _, _ = prebuild.rasterization(**scene, width=size, height=size, packed=packed)
    colors.sum().backward()


def measure(n: int, size: int, repeats: int, packed: bool, profile: bool) -> dict:
    scene = raster_scene(n, size)
    for k in ("means", "quats", "scales", "opacities", "colors"):
        scene[k].requires_grad_()
    for _ in range(10):
        _step(scene, size, packed)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        _step(scene, size, packed)
        times.append(time.perf_counter() - start)
    with _CountOps() as counter:
        _step(scene, size, packed)
    result = {
        "median_us": statistics.median(times) * 1e6,
        "min_us": min(times) * 1e6,
        "aten_ops": sum(counter.ops.values()),
        "ops": counter.ops,
    }
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(repeats):
            _step(scene, size, packed)
        prof.disable()
        result["cprofile"] = pstats.Stats(prof)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--cprofile", action="store_true")
    cfg = parser.parse_args(argv)
    torch.set_num_threads(1)
    for packed in (True, False):
        r = measure(cfg.n, cfg.size, cfg.repeats, packed, cfg.cprofile)
        mode = "packed" if packed else "dense"
        print(
            f"{mode}: {r['median_us']:.0f} us per step (min {r['min_us']:.0f}), "
            f"{r['aten_ops']} aten ops"
        )
        print("  " + ", ".join(f"{op} x{c}" for op, c in r["ops"].most_common()))
        if cfg.cprofile:
            r["cprofile"].sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
