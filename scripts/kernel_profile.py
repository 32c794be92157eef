#!/usr/bin/env python3
"""One forward + backward of each SSIM and rasterization implementation installed here, at the
bench's largest sizes, after a warm-up: the program to run under Nsight Compute on a GPU
machine, so that its report holds each implementation's kernels side by side:

    ncu --clock-control none --section SpeedOfLight --section Occupancy \\
        -k 'regex:ssim|rasteriz' python scripts/kernel_profile.py

(NVTX ranges name each implementation's step.) Needs a GPU; prebuild and the peers
(upstream fused-ssim, gsplat) installed, as in scripts/gpu_check.sh's peers venv."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", default="ssim,raster", help="ssim, raster or both")
    args = parser.parse_args()
    import torch
    from benchmarks.cpu import OURS_RASTER, OURS_SSIM, ours_rasterization, raster_scene
    from benchmarks.cuda import raster_peers, ssim_peers

    import prebuild

    device = torch.device("cuda")
    if "ssim" in args.what:
        have, _ = ssim_peers(device)
        impls = {OURS_SSIM: prebuild.fused_ssim, **{k: v for k, v in have.items() if "fused" in k}}
        x = torch.rand(4, 3, 1080, 1920, device=device, requires_grad=True)
        y = torch.rand(4, 3, 1080, 1920, device=device)
        for name, fn in impls.items():
            for i in range(3):
                x.grad = None
                with torch.cuda.nvtx.range(f"{name} {i}"):
                    fn(x, y).backward()
    if "raster" in args.what:
        have, _ = raster_peers(device)
        s = raster_scene(100_000, 1024, device=device)
        leaves = [
            s[k].requires_grad_() for k in ("means", "quats", "scales", "opacities", "colors")
        ]
        for name, fn in {OURS_RASTER: ours_rasterization, **have}.items():
            for i in range(3):
                for v in leaves:
                    v.grad = None
                with torch.cuda.nvtx.range(f"{name} {i}"):
                    fn(s, 1024).sum().backward()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
