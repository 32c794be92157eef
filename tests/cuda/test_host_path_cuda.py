"""rasterization()'s host path on a GPU: how often a training step makes the host wait.

The one wait a step needs is the intersection count, which sizes the intersection buffers:
isect_tiles reads it back with its own cudaStreamSynchronize (csrc/gsplat/intersect_cuda.cu),
which torch's sync debug mode does not see; packed mode has one more, the count of visible
pairs, read back the same way by pack_visible (csrc/gsplat/pack_cuda.cu). Every other wait
torch would report: under ``torch.cuda.set_sync_debug_mode("error")`` the forward and backward
must therefore run through, dense and packed.
"""

from __future__ import annotations

import pytest
import torch
from test_ops_cuda import RH, RW, pipeline_inputs

import prebuild


def _step(inputs: dict, **kwargs) -> None:
    colors, alphas, meta = prebuild.rasterization(**inputs, width=RW, height=RH, **kwargs)
    (colors.sum() + alphas.sum()).backward()


def _inputs(sh_degree=None, batch=()) -> dict:
    inputs = pipeline_inputs(sh_degree=sh_degree, background=True, batch=batch)
    out = {k: t.cuda() for k, t in inputs.items()}
    for k in ("means", "quats", "scales", "opacities", "colors", "viewmats", "backgrounds"):
        out[k].requires_grad_(True)
    return out


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"sh_degree": 2},
        {"rasterize_mode": "antialiased", "render_mode": "RGB+ED"},
        {"camera_model": "fisheye", "absgrad": True},
    ],
    ids=["rgb", "sh", "antialiased-ed", "fisheye-absgrad"],
)
@pytest.mark.parametrize("batch", [(), (2,)], ids=["unbatched", "batched"])
@pytest.mark.parametrize("packed", [False, True], ids=["dense", "packed"])
def test_a_step_makes_no_wait_torch_sees(kwargs, batch, packed):
    inputs = _inputs(kwargs.get("sh_degree"), batch)
    _step(inputs, packed=packed, **kwargs)  # first call: the loader's per-device check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        _step(inputs, packed=packed, **kwargs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert inputs["means"].grad.abs().sum() > 0


def test_a_non_finite_camera_renders_the_background_without_a_wait():
    """On CUDA a non-finite camera is not an error (finding it would wait for the GPU): the
    kernels cull its every pair, so it shows the background and passes no gradient."""
    inputs = _inputs()
    viewmats = inputs["viewmats"].detach().clone()
    viewmats[1, 0, 3] = float("nan")
    inputs["viewmats"] = viewmats
    torch.cuda.set_sync_debug_mode("error")
    try:
        colors, alphas, meta = prebuild.rasterization(**inputs, width=RW, height=RH, packed=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not meta["radii"][1].any() and meta["radii"][0].any()
    assert not alphas[1].any()
    torch.testing.assert_close(
        colors[1], inputs["backgrounds"][1].detach().expand_as(colors[1]), rtol=0, atol=0
    )
