"""``pack``: gsplat's packed layout of the projection's dense outputs, one op each way
(``torch.ops.prebuild.pack_visible`` / ``_backward``, csrc/gsplat/pack*), with its fake
kernels and autograd formula. ``fully_fused_projection(packed=True)`` and ``rasterization``
use it."""

from __future__ import annotations

import torch

from prebuild.ops._registration import call, register_ops


def pack(radii, means2d, depths, conics, compensations, opacities=None, colors=None):
    """gsplat's packed layout from the dense [B, C, N, ...] outputs: the visible pairs (both
    radii positive) in (batch, camera, Gaussian) order: (batch_ids, camera_ids, gaussian_ids,
    image_ids (batch * C + camera), radii, means2d, depths, conics, compensations or None),
    and with per-Gaussian ``opacities`` [B, N] and ``colors`` [B, N, F] given, each pair's
    Gaussian's rows of them (else None).

    One op (csrc/gsplat/pack.h) instead of a mask, a nonzero, the ids' divisions and a gather
    per output, and one op for the gradients back: each PyTorch op costs a GPU step host time.
    Its count of visible pairs is the one host sync of packed mode (the outputs' size)."""
    out = call("pack_visible", radii, means2d, depths, conics, compensations, opacities, colors)
    given = (compensations, opacities, colors)
    return (*out[:8], *(o if g is not None else None for o, g in zip(out[8:], given)))


def _pack_fake(radii, means2d, depths, conics, compensations, opacities=None, colors=None):
    op = "prebuild::pack_visible"
    torch._check(
        radii.dim() == 4 and radii.shape[3] == 2,
        lambda: f"{op}: radii must have shape [B, C, N, 2]",
    )
    pairs = tuple(radii.shape[:3])
    for name, t, last in (
        ("means2d", means2d, (2,)),
        ("depths", depths, ()),
        ("conics", conics, (3,)),
    ):
        torch._check(
            tuple(t.shape) == pairs + last,
            lambda name=name: f"{op}: {name} must match radii [B, C, N, 2]",
        )
    B, _, N = pairs
    torch._check(
        opacities is None or tuple(opacities.shape) == (B, N),
        lambda: f"{op}: opacities must have shape [B, N] matching radii [B, C, N, 2]",
    )
    torch._check(
        colors is None or (colors.dim() == 3 and tuple(colors.shape[:2]) == (B, N)),
        lambda: f"{op}: colors must have shape [B, N, F] matching radii [B, C, N, 2]",
    )
    nnz = torch.library.get_ctx().new_dynamic_size()
    ids = [radii.new_empty((nnz,), dtype=torch.int64) for _ in range(4)]
    return (
        *ids,
        radii.new_empty((nnz, 2)),
        means2d.new_empty((nnz, 2)),
        depths.new_empty((nnz,)),
        conics.new_empty((nnz, 3)),
        means2d.new_empty((nnz if compensations is not None else 0,)),
        means2d.new_empty((nnz if opacities is not None else 0,)),
        means2d.new_empty((nnz, colors.shape[2]) if colors is not None else (0,)),
    )


def _pack_backward_fake(
    image_ids, gaussian_ids, v_means2d, v_depths, v_conics, v_comp, v_opacities, v_colors, B, C, N
):
    def dense(v, shape):
        if v is None:
            return image_ids.new_empty((0,), dtype=torch.float32)
        return image_ids.new_empty(shape, dtype=torch.float32)

    return (
        dense(v_means2d, (B, C, N, 2)),
        dense(v_depths, (B, C, N)),
        dense(v_conics, (B, C, N, 3)),
        dense(v_comp, (B, C, N)),
        dense(v_opacities, (B, N)),
        dense(v_colors, (B, N, v_colors.shape[-1]) if v_colors is not None else ()),
    )


def _pack_setup_context(ctx, inputs, output) -> None:
    radii, _means2d, _depths, _conics, *optional = inputs
    batch_ids, camera_ids, gaussian_ids, image_ids, radii_packed = output[:5]
    ctx.save_for_backward(image_ids, gaussian_ids)
    ctx.pairs = tuple(radii.shape[:3])
    # compensations, opacities, colors (torch fills the op's defaults in before this runs)
    ctx.given = tuple(t is not None for t in optional)
    ctx.mark_non_differentiable(batch_ids, camera_ids, gaussian_ids, image_ids, radii_packed)
    ctx.set_materialize_grads(False)  # an absent gradient stays absent (no zeros written)


def _pack_backward(ops, ctx, *grads):
    image_ids, gaussian_ids = ctx.saved_tensors
    v = [None if g is None else g.contiguous() for g in grads[5:]]
    for k, given in enumerate(ctx.given):  # an absent input's [0] output has no gradient
        if not given:
            v[3 + k] = None
    dense = ops.pack_visible_backward(image_ids, gaussian_ids, *v, *ctx.pairs)
    need = ctx.needs_input_grad
    return (
        None,  # radii: integers
        *(d if g is not None and need[k + 1] else None for k, (d, g) in enumerate(zip(dense, v))),
    )[: len(need)]


register_ops(
    fakes={"pack_visible": _pack_fake, "pack_visible_backward": _pack_backward_fake},
    formulas={"pack_visible": (_pack_setup_context, _pack_backward)},
    no_double_backward=("pack_visible_backward",),
    double_backward_error="prebuild's pack_visible does not support double backward; use "
    "gsplat's plain-PyTorch packing for second derivatives",
    fast=("pack_visible",),
)
