"""Dense projection outputs for the pack_visible tests (tests/ops/test_pack.py and the CUDA
test beside the other ops'), with no import of the simt test library."""

from __future__ import annotations

import torch


def dense_outputs(B, C, N, seed=0, compensations=True, visible=0.6):
    """Dense projection outputs with a `visible` share of pairs visible; some culled pairs
    have one positive radius (still culled: both must be positive)."""
    gen = torch.Generator().manual_seed(seed)
    radii = torch.randint(1, 9, (B, C, N, 2), generator=gen, dtype=torch.int32)
    culled = torch.rand(B, C, N, generator=gen) >= visible
    half = torch.rand(B, C, N, generator=gen) < 0.3
    radii[..., 0][culled] = 0
    radii[..., 1][culled & ~half] = 0
    floats = [torch.randn(B, C, N, *last, generator=gen) for last in ((2,), (), (3,), ())]
    if not compensations:
        floats[3] = None
    return (radii, *floats)


def gaussian_inputs(B, N, F=3, seed=0):
    """Per-Gaussian opacities [B, N] and colours [B, N, F], shared by the cameras."""
    gen = torch.Generator().manual_seed(seed + 1000)
    return torch.rand(B, N, generator=gen), torch.rand(B, N, F, generator=gen)
