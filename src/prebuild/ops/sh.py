"""View-dependent colours from spherical harmonics: ``spherical_harmonics`` (gsplat 1.5.3).

A drop-in for ``gsplat.spherical_harmonics``: per direction, the real SH basis of degree
``degrees_to_use`` (0 to 4, gsplat's constants and basis order) at the normalised direction,
dotted with the direction's coefficients per colour channel. The kernels are
``torch.ops.prebuild.spherical_harmonics_forward`` / ``_backward`` (csrc/gsplat/sh*.h);
autograd and fake kernels are registered here.

Deliberate differences from gsplat 1.5.3 (all documented on the function too):

* Masked directions (``masks`` False) get zero colours; gsplat leaves them uninitialised
  (``at::empty_like``). Both give them zero gradients.
* A zero direction is normalised as gsplat's PyTorch implementation does (``F.normalize``:
  ``dir / max(|dir|, 1e-12)``, the zero vector); gsplat's CUDA kernel gives NaN there.
  A finite direction too long for float32's ``|dir|^2`` still gets its true unit vector.
* float16, bfloat16 and float64 inputs are converted to float32 (the compute type); the
  colours are float32 and gradients flow back in each input's dtype. gsplat's kernel
  accepts float32 and float64 only and returns the input dtype (computing in float32).
* ``degrees_to_use`` outside 0..4 raises ValueError (gsplat evaluates degree 4 for larger
  degrees on CUDA and reads uninitialised bases in its PyTorch implementation).
* No double backward.
"""

from __future__ import annotations

import torch

from prebuild.ops._checks import (
    check_dtype,
    check_float32,
    check_float_input,
    check_int,
    check_same_devices,
    check_tensor,
    shape_error,
)
from prebuild.ops._library import LIBRARY
from prebuild.ops._registration import call, register_ops

_NAME = "spherical_harmonics"
MAX_DEGREE = 4


def _check_inputs(degrees_to_use, dirs, coeffs, masks) -> int:
    """Validates the arguments as gsplat's wrapper does (and a little more); returns the degree."""
    degree = check_int(_NAME, "degrees_to_use", degrees_to_use, minimum=0)
    if degree > MAX_DEGREE:
        raise ValueError(f"{_NAME}: degrees_to_use must be at most {MAX_DEGREE}, got {degree}")
    dirs = check_float_input(_NAME, "dirs", dirs)
    if dirs.dim() < 1 or dirs.shape[-1] != 3:
        raise shape_error(_NAME, "dirs", "[..., 3]", dirs)
    batch = tuple(dirs.shape[:-1])
    coeffs = check_float_input(_NAME, "coeffs", coeffs)
    if coeffs.dim() != len(batch) + 2 or coeffs.shape[-1] != 3 or tuple(coeffs.shape[:-2]) != batch:
        raise ValueError(
            f"{_NAME}: coeffs must have shape [..., K, 3] with the batch dimensions of dirs "
            f"{list(batch)}, got {list(coeffs.shape)} (as in gsplat, they are not broadcast: "
            "expand them to one shape)"
        )
    K = coeffs.shape[-2]
    if (degree + 1) ** 2 > K:
        raise ValueError(
            f"{_NAME}: degree {degree} needs (degree + 1)^2 = {(degree + 1) ** 2} coefficients "
            f"per channel, coeffs has K = {K}"
        )
    tensors = {"dirs": dirs, "coeffs": coeffs}
    if masks is not None:
        masks = check_tensor(_NAME, "masks", masks, torch.bool)
        if tuple(masks.shape) != batch:
            raise shape_error(_NAME, "masks", f"{list(batch)} (the batch shape of dirs)", masks)
        tensors["masks"] = masks
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        where = ", ".join(f"{n} on {t.device}" for n, t in tensors.items())
        raise ValueError(f"{_NAME}: all tensors must be on the same device, got {where}")
    return degree


def spherical_harmonics(
    degrees_to_use: int,
    dirs: torch.Tensor,
    coeffs: torch.Tensor,
    masks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Evaluates spherical harmonics (gsplat 1.5.3's ``spherical_harmonics``).

    Args:
        degrees_to_use: the SH degree to evaluate, 0 to 4: the first
            ``(degrees_to_use + 1) ** 2`` coefficients of each direction are used.
        dirs: [..., 3] view directions; normalised inside (``dir / max(|dir|, 1e-12)``), so
            any length works. Degree 0 does not depend on them.
        coeffs: [..., K, 3] coefficients per basis function and colour channel, with the
            batch dimensions of ``dirs`` (not broadcast, as in gsplat) and
            ``K >= (degrees_to_use + 1) ** 2``; coefficients past that are ignored.
        masks: optional [...] bool; directions where it is False are skipped: zero colours
            (gsplat leaves them uninitialised) and zero gradients.

    All tensors must be on one device (CPU or CUDA). float32 is the compute type: float16,
    bfloat16 and float64 inputs are converted and the colours are float32.

    Returns:
        colors [..., 3]: ``sum_k basis_k(dir) * coeffs[..., k, :]``, without the +0.5 offset
        that gsplat's rasterization adds.

    Gradients flow to ``coeffs`` and, through the normalisation, to ``dirs`` (zeros for
    degree 0, as gsplat's kernel). No double backward.
    """
    degree = _check_inputs(degrees_to_use, dirs, coeffs, masks)
    if not torch.compiler.is_compiling() and dirs.is_cuda:
        LIBRARY.ensure_device(dirs.device)
    return evaluate(degree, dirs, coeffs, masks)


def evaluate(degree: int, dirs: torch.Tensor, coeffs: torch.Tensor, masks) -> torch.Tensor:
    """``spherical_harmonics`` of arguments its checks (or ``rasterization``'s) passed."""
    return call(
        "spherical_harmonics_forward",
        degree,
        _f32(dirs),
        _f32(coeffs),
        None if masks is None else masks.contiguous(),
    )


def _f32(t: torch.Tensor) -> torch.Tensor:
    """``t`` contiguous in float32, dispatching no conversion when it already is."""
    return (t if t.dtype == torch.float32 else t.to(torch.float32)).contiguous()


# ------------------------------------------------------------------------ fake kernels

_FWD = "prebuild::spherical_harmonics_forward"
_BWD = "prebuild::spherical_harmonics_backward"


def _check_fake(op, degrees_to_use, dirs, coeffs, masks) -> None:
    """The shape/dtype/device checks of sh.h's check_inputs."""
    torch._check(
        0 <= degrees_to_use <= MAX_DEGREE,
        lambda: f"{op}: degrees_to_use must be in [0, {MAX_DEGREE}], got {degrees_to_use}",
    )
    torch._check(
        dirs.dim() >= 1 and dirs.shape[-1] == 3, lambda: f"{op}: dirs must have shape [..., 3]"
    )
    batch = dirs.shape[:-1]
    torch._check(
        coeffs.dim() == dirs.dim() + 1 and coeffs.shape[:-2] == batch and coeffs.shape[-1] == 3,
        lambda: f"{op}: coeffs must have shape [..., K, 3] with the batch dimensions of dirs",
    )
    torch._check(
        (degrees_to_use + 1) ** 2 <= coeffs.shape[-2],
        lambda: (
            f"{op}: degree {degrees_to_use} needs (degree + 1)^2 coefficients per channel, "
            f"coeffs has K = {coeffs.shape[-2]}"
        ),
    )
    tensors = {"dirs": dirs, "coeffs": coeffs}
    if masks is not None:
        torch._check(
            masks.shape == batch,
            lambda: (
                f"{op}: masks must have the batch shape of dirs (dirs without its last dimension)"
            ),
        )
        check_dtype(op, torch.bool, masks=masks)
        tensors["masks"] = masks
    check_same_devices(op, **tensors)
    check_float32(op, dirs=dirs, coeffs=coeffs)


def _forward_fake(degrees_to_use, dirs, coeffs, masks):
    _check_fake(_FWD, degrees_to_use, dirs, coeffs, masks)
    return dirs.new_empty(dirs.shape)


def _backward_fake(degrees_to_use, dirs, coeffs, masks, v_colors, compute_v_dirs):
    _check_fake(_BWD, degrees_to_use, dirs, coeffs, masks)
    torch._check(
        v_colors.shape == dirs.shape, lambda: f"{_BWD}: v_colors must have the shape of dirs"
    )
    check_float32(_BWD, v_colors=v_colors)
    check_same_devices(_BWD, dirs=dirs, v_colors=v_colors)
    return coeffs.new_empty(coeffs.shape), dirs.new_empty(dirs.shape if compute_v_dirs else (0,))


# ---------------------------------------------------------------------------- autograd


def _setup_context(ctx, inputs, output) -> None:
    degrees_to_use, dirs, coeffs, masks = inputs
    ctx.save_for_backward(dirs, coeffs, masks)
    ctx.degrees_to_use = degrees_to_use


def _backward(ops, ctx, v_colors):
    dirs, coeffs, masks = ctx.saved_tensors
    need = ctx.needs_input_grad
    v_coeffs, v_dirs = ops.spherical_harmonics_backward(
        ctx.degrees_to_use, dirs, coeffs, masks, v_colors.contiguous(), need[1]
    )
    return None, v_dirs if need[1] else None, v_coeffs if need[2] else None, None


register_ops(
    fakes={
        "spherical_harmonics_forward": _forward_fake,
        "spherical_harmonics_backward": _backward_fake,
    },
    formulas={"spherical_harmonics_forward": (_setup_context, _backward)},
    no_double_backward=("spherical_harmonics_backward",),
    double_backward_error=f"{_NAME} does not support double backward; use gsplat's plain-PyTorch "
    "_spherical_harmonics for second derivatives",
    fast=("spherical_harmonics_forward",),
)
