"""3D covariances and precisions from quaternions and scales: ``quat_scale_to_covar_preci``
(gsplat 1.5.3).

A drop-in for ``gsplat.quat_scale_to_covar_preci``: per Gaussian, R = the rotation of the
normalised quaternion (w, x, y, z), covariance R diag(s)^2 R^T and precision (its inverse)
R diag(s)^-2 R^T, over any batch dimensions. The kernels are
``torch.ops.prebuild.quat_scale_to_covar_preci_forward`` / ``_backward`` (csrc/gsplat/);
autograd and fake kernels are registered here.

Differences from gsplat 1.5.3 (documented on the function too):

* float16, bfloat16 and float64 inputs are converted to float32 (the compute type; gsplat's
  kernel also takes float64); the outputs are float32 and gradients flow back in each
  input's dtype.
* Non-contiguous inputs (such as ``expand``-ed ones) are copied to contiguous float32 as
  gsplat's wrapper does; invalid inputs raise TypeError/ValueError naming the argument
  (gsplat asserts).
"""

from __future__ import annotations

import torch

from prebuild.ops._checks import (
    check_bool,
    check_float32,
    check_float_input,
    check_same_devices,
    shape_error,
)
from prebuild.ops._library import LIBRARY, kernels
from prebuild.ops._registration import register_ops

_NAME = "quat_scale_to_covar_preci"


def _check_inputs(quats: object, scales: object) -> None:
    quats = check_float_input(_NAME, "quats", quats)
    scales = check_float_input(_NAME, "scales", scales)
    if quats.dim() < 1 or quats.shape[-1] != 4:
        raise shape_error(_NAME, "quats", "(..., 4)", quats)
    expected = (*quats.shape[:-1], 3)
    if tuple(scales.shape) != expected:
        raise shape_error(
            _NAME, "scales", f"{expected} (the batch dimensions of quats, then 3)", scales
        )
    if quats.device != scales.device:
        raise ValueError(
            f"{_NAME}: quats and scales must be on the same device, got quats on "
            f"{quats.device}, scales on {scales.device}"
        )


def quat_scale_to_covar_preci(
    quats: torch.Tensor,
    scales: torch.Tensor,
    compute_covar: bool = True,
    compute_preci: bool = True,
    triu: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Covariance and precision matrices of Gaussians (gsplat 1.5.3 conventions).

    Args:
        quats: (..., 4) rotations (w, x, y, z), normalised inside (need not be unit).
        scales: (..., 3) scales, with the batch dimensions of quats.
        compute_covar: compute the covariances R diag(s)^2 R^T (else None is returned).
        compute_preci: compute the precisions R diag(s)^-2 R^T (else None is returned).
        triu: return each matrix as its upper triangle (xx, xy, xz, yy, yz, zz), shape
            (..., 6), instead of (..., 3, 3).

    Both tensors must be on one device (CPU or CUDA); any strides (expanded, sliced) are
    accepted. float32 is the compute type: float16, bfloat16 and float64 inputs are converted
    to float32 and the outputs are float32.

    Returns:
        (covars, precis), each (..., 3, 3) or, with triu, (..., 6); None for one not
        computed. A zero scale gives an infinite precision, as gsplat's.

    Gradients flow to quats and scales from both outputs (a packed off-diagonal entry stands
    for both entries of its pair, as in gsplat's plain-PyTorch version, which averages them).
    """
    _check_inputs(quats, scales)
    check_bool(_NAME, "compute_covar", compute_covar)
    check_bool(_NAME, "compute_preci", compute_preci)
    check_bool(_NAME, "triu", triu)
    if quats.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(quats.device)

    covars, precis = kernels().quat_scale_to_covar_preci_forward(
        quats.to(torch.float32).contiguous(),
        scales.to(torch.float32).contiguous(),
        compute_covar,
        compute_preci,
        triu,
    )
    return covars if compute_covar else None, precis if compute_preci else None


# ------------------------------------------------------------------------ fake kernels

_FWD = "prebuild::quat_scale_to_covar_preci_forward"
_BWD = "prebuild::quat_scale_to_covar_preci_backward"


def _matrix_shape(batch, triu: bool) -> tuple:
    return (*batch, 6) if triu else (*batch, 3, 3)


def _check_gaussians_fake(op, quats, scales):
    """The shape/dtype/device checks of covariance.h's check_gaussians; returns the batch
    dimensions."""
    torch._check(
        quats.dim() >= 1 and quats.shape[-1] == 4, lambda: f"{op}: quats must have shape (..., 4)"
    )
    batch = tuple(quats.shape[:-1])
    torch._check(
        tuple(scales.shape) == (*batch, 3),
        lambda: f"{op}: scales must have shape (..., 3) with the batch dimensions of quats",
    )
    check_same_devices(op, quats=quats, scales=scales)
    check_float32(op, quats=quats, scales=scales)
    return batch


def _forward_fake(quats, scales, compute_covar, compute_preci, triu):
    batch = _check_gaussians_fake(_FWD, quats, scales)
    shape = _matrix_shape(batch, triu)
    return (
        quats.new_empty(shape if compute_covar else (0,)),
        quats.new_empty(shape if compute_preci else (0,)),
    )


def _backward_fake(quats, scales, triu, v_covars, v_precis):
    batch = _check_gaussians_fake(_BWD, quats, scales)
    for name, v in (("v_covars", v_covars), ("v_precis", v_precis)):
        if v is not None:
            torch._check(
                tuple(v.shape) == _matrix_shape(batch, triu),
                lambda name=name: (
                    f"{_BWD}: {name} must have the batch dimensions of quats, "
                    f"then {'6 (triu=True)' if triu else '3, 3 (triu=False)'}"
                ),
            )
            check_same_devices(_BWD, quats=quats, **{name: v})
            check_float32(_BWD, **{name: v})
    return quats.new_empty((*batch, 4)), quats.new_empty((*batch, 3))


# ---------------------------------------------------------------------------- autograd


def _setup_context(ctx, inputs, output) -> None:
    quats, scales, compute_covar, compute_preci, triu = inputs
    ctx.save_for_backward(quats, scales)
    ctx.compute_covar, ctx.compute_preci, ctx.triu = compute_covar, compute_preci, triu


def _backward(ops, ctx, v_covars, v_precis):
    quats, scales = ctx.saved_tensors

    def grad(v, computed):  # None for an output not computed or not reached by the loss
        return v.contiguous() if computed and v is not None else None

    v_quats, v_scales = ops.quat_scale_to_covar_preci_backward(
        quats,
        scales,
        ctx.triu,
        grad(v_covars, ctx.compute_covar),
        grad(v_precis, ctx.compute_preci),
    )
    need = ctx.needs_input_grad
    return v_quats if need[0] else None, v_scales if need[1] else None, None, None, None


register_ops(
    fakes={
        "quat_scale_to_covar_preci_forward": _forward_fake,
        "quat_scale_to_covar_preci_backward": _backward_fake,
    },
    formulas={"quat_scale_to_covar_preci_forward": (_setup_context, _backward)},
    no_double_backward=("quat_scale_to_covar_preci_backward",),
    double_backward_error=f"{_NAME} does not support double backward; use gsplat's plain-PyTorch "
    "_quat_scale_to_covar_preci for second derivatives",
)
