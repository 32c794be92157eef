#!/usr/bin/env python3
"""Time to the first ``fused_ssim`` result in fresh interpreters, for one or more Pythons
with prebuild installed: how docs/benchmarks-history.md compares two builds.

Each run is a new interpreter timed from just after ``import torch`` to the first result
(``import prebuild``, the libraries loaded, one 16x16 call), as section 2 of
scripts/bench.py does; runs of the interpreters are interleaved so that load on the
machine falls on all of them alike.

  scripts/first_call.py /tmp/old/bin/python /tmp/new/bin/python --runs 25
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = """
import time, torch
t0 = time.perf_counter()
import prebuild
x = torch.rand(1, 3, 16, 16)
float(prebuild.fused_ssim(x, x))
print(1e3 * (time.perf_counter() - t0))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("pythons", nargs="+", help="interpreters with prebuild and torch installed")
    parser.add_argument("--runs", type=int, default=25, help="runs per interpreter (default 25)")
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {p: [] for p in args.pythons}
    for _ in range(args.runs):
        for python in args.pythons:
            proc = subprocess.run(
                [python, "-c", CHILD], capture_output=True, text=True, timeout=300
            )
            if proc.returncode != 0:
                print(f"{python} failed:\n{proc.stderr}", file=sys.stderr)
                return 1
            samples[python].append(float(proc.stdout.strip().splitlines()[-1]))
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for python, values in samples.items():
        values.sort()
        print(
            f"{python}: median {statistics.median(values):.1f} ms, min {values[0]:.1f}, "
            f"max {values[-1]:.1f}, n={len(values)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
