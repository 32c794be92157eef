"""MCMC relocation: ``compute_relocation`` (gsplat 1.5.3).

A drop-in for ``gsplat.relocation.compute_relocation``: Equation 9 of "3D Gaussian Splatting
as Markov Chain Monte Carlo". A Gaussian sampled ``ratio`` times (itself included) is split
into ``ratio`` copies that together render like it: each gets opacity
``1 - (1 - opacity)^(1/ratio)`` and its scales times ``opacity / D``, D being the equation's
double sum over the binomial table ``binoms``. gsplat's MCMC strategy
(``gsplat/strategy/ops.py``: ``relocate``, ``sample_add``) calls it with
``ratios = bincount(sampled)[sampled] + 1`` and gsplat's 51 x 51 table of ``math.comb``.
The kernel is ``torch.ops.prebuild.compute_relocation`` (csrc/gsplat/relocation*); fake and
autograd kernels are registered here.

Differences from gsplat 1.5.3 (documented on the function too):

* ``ratios`` are clamped to [1, n_max] as gsplat's wrapper clamps them, but into a new
  tensor: gsplat clamps the caller's tensor in place.
* float16, bfloat16 and float64 inputs are converted to float32 (the compute type; gsplat's
  kernel also takes float64 but computes its sums in float32); the outputs are float32.
* The new opacity is computed as ``-expm1(log1p(-opacity) / ratio)`` (the same value, without
  the rounding of ``1 - opacity`` that costs small opacities their low bits), and exactly
  ``opacity`` for ratio 1, so ratio 1 returns the inputs unchanged.
* Invalid inputs raise TypeError/ValueError naming the argument (gsplat asserts).
"""

from __future__ import annotations

import torch

from prebuild.ops._checks import (
    check_dtype,
    check_float32,
    check_float_input,
    check_same_devices,
    check_tensor,
    shape_error,
)
from prebuild.ops._library import LIBRARY, kernels
from prebuild.ops._registration import register_ops

_NAME = "compute_relocation"
_RATIO_DTYPES = (torch.int32, torch.int64)


def _check_inputs(opacities, scales, ratios, binoms) -> int:
    """Validates the arguments as gsplat's wrapper does (and a little more); returns n_max."""
    opacities = check_float_input(_NAME, "opacities", opacities)
    if opacities.dim() != 1:
        raise shape_error(_NAME, "opacities", "[N]", opacities)
    n = opacities.shape[0]
    scales = check_float_input(_NAME, "scales", scales)
    if tuple(scales.shape) != (n, 3):
        raise shape_error(_NAME, "scales", f"[N, 3] = [{n}, 3] (N from opacities)", scales)
    ratios = check_tensor(_NAME, "ratios", ratios)
    if ratios.dtype not in _RATIO_DTYPES:
        raise TypeError(f"{_NAME}: ratios must be int32 or int64, got {ratios.dtype}")
    if tuple(ratios.shape) != (n,):
        raise shape_error(_NAME, "ratios", f"[N] = [{n}] (N from opacities)", ratios)
    binoms = check_float_input(_NAME, "binoms", binoms)
    if binoms.dim() != 2 or binoms.shape[0] != binoms.shape[1] or binoms.shape[0] < 1:
        raise shape_error(_NAME, "binoms", "[n_max, n_max] with n_max >= 1", binoms)
    tensors = {"opacities": opacities, "scales": scales, "ratios": ratios, "binoms": binoms}
    if len({t.device for t in tensors.values()}) > 1:
        where = ", ".join(f"{name} on {t.device}" for name, t in tensors.items())
        raise ValueError(f"{_NAME}: all tensors must be on the same device, got {where}")
    return binoms.shape[0]


def compute_relocation(
    opacities: torch.Tensor,
    scales: torch.Tensor,
    ratios: torch.Tensor,
    binoms: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New opacities and scales for relocated Gaussians (gsplat 1.5.3's
    ``compute_relocation``, Equation 9 of "3D Gaussian Splatting as Markov Chain Monte Carlo").

    Args:
        opacities: [N] opacities (in [0, 1]) of the Gaussians.
        scales: [N, 3] their scales.
        ratios: [N] int32 or int64: how many Gaussians each one becomes (itself included).
            Clamped to [1, n_max] as gsplat clamps them (the caller's tensor is left alone;
            gsplat clamps it in place). Values are not checked: that would synchronise with
            the device.
        binoms: [n_max, n_max] table of binomial coefficients, ``binoms[n, k] = C(n, k)``
            (gsplat's MCMCStrategy builds it with n_max = 51).

    All tensors must be on one device (CPU or CUDA); any strides are accepted. float32 is the
    compute type: float16, bfloat16 and float64 inputs are converted and the outputs are
    float32.

    Returns:
        (new_opacities [N], new_scales [N, 3]) with, per Gaussian and r its clamped ratio,
        ``new_opacity = 1 - (1 - opacity)^(1/r)`` (so ``1 - (1 - new_opacity)^r = opacity``)
        and ``new_scale = opacity / D * scale``,
        ``D = sum_{i=1..r} sum_{k=0..i-1} binoms[i-1, k] (-1)^k / sqrt(k+1) new_opacity^(k+1)``.
        Ratio 1 returns the opacity and scales unchanged (with ``binoms[0, 0] = 1``). An
        opacity of 0 gives NaN scales (0 / 0), as in gsplat; callers sample Gaussians by
        opacity, so they never pass one.

    Not differentiable (gsplat's has no gradient either): the outputs never require grad,
    whatever the inputs.
    """
    n_max = _check_inputs(opacities, scales, ratios, binoms)
    if opacities.is_cuda and not torch.compiler.is_compiling():
        LIBRARY.ensure_device(opacities.device)
    # Clamped before narrowing, so an int64 ratio past int32 cannot wrap around.
    ratios = ratios.clamp(min=1, max=n_max).to(torch.int32)
    return kernels().compute_relocation(
        opacities.to(torch.float32).contiguous(),
        scales.to(torch.float32).contiguous(),
        ratios.contiguous(),
        binoms.to(torch.float32).contiguous(),
    )


# ------------------------------------------------------------------------- fake kernel

_OP = "prebuild::compute_relocation"


def _fake(opacities, scales, ratios, binoms):
    """The shape/dtype/device checks of relocation.h's check_inputs."""
    torch._check(opacities.dim() == 1, lambda: f"{_OP}: opacities must have shape [N]")
    n = opacities.shape[0]
    torch._check(
        scales.dim() == 2 and scales.shape[0] == n and scales.shape[1] == 3,
        lambda: f"{_OP}: scales must have shape [N, 3] with N = {n} (the opacities')",
    )
    torch._check(
        ratios.dim() == 1 and ratios.shape[0] == n,
        lambda: f"{_OP}: ratios must have shape [N] with N = {n} (the opacities')",
    )
    torch._check(
        binoms.dim() == 2 and binoms.shape[0] == binoms.shape[1] and binoms.shape[0] >= 1,
        lambda: f"{_OP}: binoms must have shape [n_max, n_max] with n_max >= 1",
    )
    check_same_devices(_OP, opacities=opacities, scales=scales, ratios=ratios, binoms=binoms)
    check_float32(_OP, opacities=opacities, scales=scales, binoms=binoms)
    check_dtype(_OP, torch.int32, ratios=ratios)
    return opacities.new_empty((n,)), scales.new_empty((n, 3))


# ---------------------------------------------------------------------------- autograd


def _setup_context(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(*output)


def _backward(ops, ctx, v_new_opacities, v_new_scales):
    # Never reached: both outputs are marked non-differentiable.
    raise RuntimeError(f"{_NAME} is not differentiable")


# The formula: without one, inputs that require grad would give outputs that seem to require
# grad and fail at backward; marked non-differentiable, the outputs never require grad.
register_ops(
    fakes={"compute_relocation": _fake},
    formulas={"compute_relocation": (_setup_context, _backward)},
)
